"""Values the sample processes send back for a ``.gpu()`` copy alone go to the upload area (or
else are unpacked into pinned blocks) and are uploaded sample by sample from there
(``_upload_area.py``, ``operators/_copy.py``: ``PinnedSamples``): the area and the blocks are
page-locked, the device batch equals the host samples, and DLE Jasper's CPU chain in sample
processes gives on the GPU the batches it gives on the CPU."""

from __future__ import annotations

import mmap
import os
import wave

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402
from dlpipe._ipc import process as ipc_process  # noqa: E402
from dlpipe._sample_server import pack, unpack  # noqa: E402
from dlpipe._upload_area import UploadArea  # noqa: E402
from dlpipe.operators import _copy  # noqa: E402
from dlpipe.options import RuntimeOptions  # noqa: E402


def _upload_and_compare(monkeypatch, samples, got, spans):
    """Copy ``got`` (views of pinned memory) up: one ``memcpyAsync`` a sample, each equal to the
    host sample. Returns the copy operator (its pending uploads hold the views)."""
    copies = []
    real = cupy.cuda.runtime.memcpyAsync
    monkeypatch.setattr(cupy.cuda.runtime, "memcpyAsync", lambda *a: copies.append(a) or real(*a))
    op = _copy.CopyToGpu(device="mixed")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        out = op.run_batch([_copy.PinnedSamples(got, spans)], {}, None, stream)
    stream.synchronize()
    assert len(copies) == len(samples)
    for a, b in zip(samples, out, strict=True):
        np.testing.assert_array_equal(a, cupy.asnumpy(b))
    return op


@pytest.mark.parametrize("ragged", [True, False])
def test_pinned_samples_go_up_in_place(monkeypatch, ragged):
    rng = np.random.default_rng(4)
    sizes = rng.integers(20_000, 60_000, 9) if ragged else [40_000] * 9
    samples = [rng.standard_normal(int(n)).astype(np.float32) for n in sizes]
    memory = mmap.mmap(-1, 1 << 22)
    blocks = _copy.PinnedBlocks(0)
    got = unpack(pack(samples, memory), memory, blocks)
    attrs = cupy.cuda.runtime.pointerGetAttributes(blocks.spans[0][0])
    kind = getattr(attrs, "type", getattr(attrs, "memoryType", None))  # by CuPy's version
    assert kind == 1  # cudaMemoryTypeHost: page-locked
    _upload_and_compare(monkeypatch, samples, got, blocks.spans)


def test_upload_area_is_page_locked_and_goes_up_in_place(monkeypatch):
    area = UploadArea(64 << 20)
    area.close_fd()
    blocks = _copy.PinnedBlocks(0)
    assert blocks.share(area) and area.usable
    attrs = cupy.cuda.runtime.pointerGetAttributes(area.address + (1 << 20))
    assert getattr(attrs, "type", getattr(attrs, "memoryType", None)) == 1
    rng = np.random.default_rng(5)
    samples = [rng.standard_normal(int(n)).astype(np.float32) for n in (70_000, 90_000, 30_000)]
    span = area.reserve(1, sum(a.nbytes for a in samples))
    got = area.unpack(pack(samples, area.memory, span), span)
    op = _upload_and_compare(monkeypatch, samples, got, blocks.spans)
    area.retire()
    op._pending.clear()
    del got
    import gc

    gc.collect()
    assert area.unlock is None  # unregistered once nothing viewed it


def _write_wav(path: str, x: np.ndarray, rate: int) -> None:
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())


@pytest.mark.skipif(not ipc_process.supported(), reason="helpers need Linux memfd")
def test_jasper_chain_in_processes_goes_up_from_pinned_blocks(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    lines = []
    for k in range(8):
        n = int(16000 * (1.0 + 0.3 * k))
        x = np.zeros(n, np.float32)
        x[1600:-1600] = 0.3 * np.sin(np.arange(n - 3200) * 0.05) + rng.normal(0, 0.02, n - 3200)
        _write_wav(str(tmp_path / f"u{k}.wav"), x, 16000)
        lines.append(f"u{k}.wav {k}")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    in_place = []
    real = _copy.CopyToGpu._upload_in_place

    def spy(self, samples, stream):
        out = real(self, samples, stream)
        in_place.append(out is not None)
        return out

    monkeypatch.setattr(_copy.CopyToGpu, "_upload_in_place", spy)
    shared = []
    real_unpack = UploadArea.unpack
    monkeypatch.setattr(UploadArea, "unpack", lambda *a: shared.append(1) or real_unpack(*a))

    def build(device_id):
        pipe = Pipeline(batch_size=4, num_threads=2, device_id=device_id, seed=5,
                        runtime=RuntimeOptions(sample_processes=True))  # fmt: skip
        with pipe:
            encoded, _ = fn.readers.file(file_root=str(tmp_path),
                                         file_list=os.path.join(tmp_path, "list.txt"))  # fmt: skip
            audio, _ = fn.decoders.audio(encoded, sample_rate=16000, dtype=types.FLOAT,
                                         downmix=True)  # fmt: skip
            begin, length = fn.nonsilent_region(audio, cutoff_db=-60)
            audio = fn.slice(audio, begin, length, axes=[0])
            pipe.set_outputs(audio.gpu() if device_id is not None else audio)
        pipe.build()
        return pipe

    cpu, gpu = build(None), build(0)
    for _ in range(4):
        (want,), (got,) = cpu.run(), gpu.run()
        got = got.as_cpu()
        assert len(got) == len(want)
        for i in range(len(want)):
            np.testing.assert_array_equal(got.at(i), want.at(i))
    cpu.close()
    gpu.close()
    assert in_place and all(in_place)
    assert shared  # the replies went to the upload area: no copy on the pipeline's side
