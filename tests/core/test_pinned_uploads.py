"""Values the sample processes send back for a ``.gpu()`` copy alone are unpacked into pinned
blocks and uploaded sample by sample from there (``operators/_copy.py``, ``PinnedSamples``),
run against the stand-in CuPy of ``ci/fake_cupy``: each sample's copy reads its own bytes into
its place in the batch the staged copy would make, and anything else is staged as before.
tests/gpu/test_tensors_gpu.py and tests/gpu/test_audio_gpu.py check the same on a GPU."""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np
import pytest
from audio_data import speech_like, to_pcm, write_wav
from test_gpu_host_batching import fake_cupy  # noqa: F401 (the fixture)

from dlpipe import Pipeline, fn, types
from dlpipe._ipc import process as ipc_process
from dlpipe._sample_server import pack, unpack
from dlpipe._upload_area import UploadArea
from dlpipe.operators import _copy
from dlpipe.options import RuntimeOptions


def _record_copies(monkeypatch, cupy) -> list:
    """(destination, the source's bytes) of each host-to-device ``memcpyAsync``, in order."""
    sent = []

    def memcpy(dst, src, size, kind, stream):
        assert kind == cupy.cuda.runtime.memcpyHostToDevice
        sent.append((dst, ctypes.string_at(src, size)))

    monkeypatch.setattr(cupy.cuda.runtime, "memcpyAsync", memcpy)
    return sent


def _unpacked(samples: list, blocks) -> list:
    """``samples`` through a sample process's reply: packed into a memfd-like mapping and
    unpacked with ``blocks`` as the allocator."""
    memory = mmap.mmap(-1, 1 << 22)
    return unpack(pack(samples, memory), memory, blocks)


@pytest.mark.parametrize("ragged", [True, False])
def test_samples_in_pinned_blocks_go_up_in_place(fake_cupy, monkeypatch, ragged):  # noqa: F811
    from dlpipe.operators._copy import CopyToGpu, PinnedBlocks, PinnedSamples

    rng = np.random.default_rng(3)
    sizes = rng.integers(20_000, 60_000, 9) if ragged else [40_000] * 9
    samples = [rng.standard_normal(int(n)).astype(np.float32) for n in sizes]
    blocks = PinnedBlocks(0)
    got = _unpacked(samples, blocks)
    assert len(blocks.spans) == 1
    sent = _record_copies(monkeypatch, fake_cupy)
    op = CopyToGpu(device="mixed")
    stream = fake_cupy.cuda.Stream()
    batch = PinnedSamples(got, blocks.spans)
    out = op.run_batch([batch], {}, None, stream)
    assert op._pending[-1][1] is batch  # the blocks are held until the copies have passed
    staged = op.run_batch([[s.copy() for s in samples]], {}, None, stream)
    assert [d for d, _ in sent] == out.ptrs.tolist()  # each sample into its own place
    assert [b for _, b in sent] == [s.tobytes() for s in samples]
    base, staged_base = int(out.ptrs[0]), int(staged.ptrs[0])
    assert (out.ptrs - base).tolist() == (staged.ptrs - staged_base).tolist()
    np.testing.assert_array_equal(out.shapes, staged.shapes)
    np.testing.assert_array_equal(out.strides, staged.strides)
    assert out.dtype == staged.dtype == np.float32
    assert len(sent) == len(samples)  # the staged copy made none of these


def test_samples_outside_the_blocks_or_small_are_staged(fake_cupy, monkeypatch):  # noqa: F811
    from dlpipe.operators._copy import CopyToGpu, PinnedBlocks, PinnedSamples

    big = [np.full(30_000, k, np.float32) for k in range(4)]
    blocks = PinnedBlocks(0)
    got = _unpacked(big, blocks)
    sent = _record_copies(monkeypatch, fake_cupy)
    op = CopyToGpu(device="mixed")
    stream = fake_cupy.cuda.Stream()
    fake_cupy.COUNTS.clear()
    op.run_batch([PinnedSamples([*got[:3], big[3]], blocks.spans)], {}, None, stream)
    small = _unpacked([np.ones(100, np.float32)] * 4, blocks)
    op.run_batch([PinnedSamples(small, blocks.spans)], {}, None, stream)
    assert sent == [] and fake_cupy.COUNTS["h2d"] == 2  # one staged copy each


@pytest.mark.skipif(not ipc_process.supported(), reason="helpers need Linux memfd")
@pytest.mark.parametrize("room", [True, False, None])
def test_trimmed_audio_goes_up_from_the_sample_processes_replies(
    fake_cupy,  # noqa: F811
    monkeypatch,
    tmp_path,
    room,
):
    """DLE Jasper's CPU part in sample processes, then ``.gpu()``: every sample's upload reads
    the bytes the CPU pipeline gives for it, in the batch's order, from the upload area, or
    (no room there, or no area: ``RuntimeOptions(upload_area_mb=0)``) from the pinned blocks the
    replies were unpacked into."""
    lines = []
    for k in range(8):
        n = int(16000 * (1.0 + 0.2 * k))
        write_wav(str(tmp_path / f"u{k}.wav"), to_pcm(speech_like(n, 16000, seed=k), 16), 16000)
        lines.append(f"u{k}.wav {k}")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")

    def build(device_id):
        # synchronous: the copies come in the batches' order (lanes would interleave them)
        pipe = Pipeline(batch_size=4, num_threads=2, device_id=device_id, seed=5,
                        exec_async=False, exec_pipelined=False, prefetch_queue_depth=1,
                        runtime=RuntimeOptions(sample_processes=device_id is not None,
                                               upload_area_mb=0 if room is None else 256))  # fmt: skip
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

    want = []
    cpu = build(None)
    for _ in range(4):
        want += [np.asarray(x).tobytes() for x in cpu.run()[0]]
    sent = _record_copies(monkeypatch, fake_cupy)
    shared = []
    real_unpack = UploadArea.unpack
    monkeypatch.setattr(UploadArea, "unpack", lambda *a: shared.append(1) or real_unpack(*a))
    if room is False:
        monkeypatch.setattr(UploadArea, "reserve", lambda *a: None)
    blocks = []
    real_pinned = _copy._pinned
    monkeypatch.setattr(_copy, "_pinned", lambda *a: blocks.append(1) or real_pinned(*a))
    gpu = build(0)
    for _ in range(4):
        gpu.run()
    assert [b for _, b in sent] == want
    # the replies went to the upload area, page-locked once: no copy on the pipeline's side;
    # else each into a pinned block
    assert fake_cupy.COUNTS["host_register"] == (room is not None)
    assert (len(shared) >= 4 and not blocks) if room else (not shared and len(blocks) >= 4)
    cpu.close()
    gpu.close()


@pytest.mark.parametrize("start", [0, 64, 3])
def test_unpack_into_one_block_gives_the_same_arrays(start):
    """A reply's arrays unpacked into one block (``alloc``) equal those unpacked into arrays of
    their own, whether the reply's spans lie as the block's (one copy: the region starts
    64-byte aligned) or not."""
    rng = np.random.default_rng(start)
    reply = [(k, rng.standard_normal(int(n)).astype(np.float32)) for k, n in
             enumerate(rng.integers(1, 5000, 7))]  # fmt: skip
    reply.append((7, np.arange(12, dtype=np.int16).reshape(3, 4)))
    memory = mmap.mmap(-1, 1 << 20)
    packed = pack(reply, memory, (start, (1 << 20) - start))
    blocks = []

    def alloc(nbytes):
        blocks.append(np.zeros(nbytes, np.uint8))
        return blocks[-1]

    got, want = unpack(packed, memory, alloc), unpack(packed, memory)
    assert len(blocks) == 1
    for (i, x), (j, y) in zip(got, want, strict=True):
        assert i == j and x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)
        assert np.shares_memory(x, blocks[0])


def _nemo_manifest(tmp_path):
    """Six utterances of 1.5-3 s (each above ``_copy.IN_PLACE_MIN_BYTES``: it goes up in
    place) and their NeMo manifest."""
    import json

    entries = []
    for k in range(6):
        path = str(tmp_path / f"u{k}.wav")
        seconds = 1.5 + 0.3 * k
        write_wav(path, to_pcm(speech_like(int(16000 * seconds), 16000, seed=k), 16), 16000)
        entries.append({"audio_filepath": path, "duration": seconds, "text": f"t{k}"})
    manifest = tmp_path / "manifest.json"
    manifest.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return manifest


def _nemo_pipe(manifest, device_id, more):
    """NeMo's reader (audio, entry index) of ``manifest``, batches of 3, synchronous, in
    sample processes when on a GPU; outputs: the audio (copied to the GPU when there is one)
    and ``more(audio, idx)``."""
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=device_id, seed=5,
                    exec_async=False, exec_pipelined=False, prefetch_queue_depth=1,
                    runtime=RuntimeOptions(sample_processes=device_id is not None))  # fmt: skip
    with pipe:
        audio, idx = fn.readers.nemo_asr(manifest_filepaths=[str(manifest)],
                                         read_sample_rate=False, read_text=False,
                                         read_idxs=True, random_shuffle=True, name="Reader")  # fmt: skip
        pipe.set_outputs(audio.gpu() if device_id is not None else audio, *more(audio, idx))
    pipe.build()
    return pipe


@pytest.mark.skipif(not ipc_process.supported(), reason="helpers need Linux memfd")
def test_nemo_reader_decodes_in_the_sample_processes(fake_cupy, monkeypatch, tmp_path):  # noqa: F811
    """NeMo's graph: ``readers.nemo_asr`` (audio, entry index) decodes in the sample
    processes; its audio, which only ``.gpu()`` takes, goes up from the upload area, and the
    indices (a CPU output) come back as the threads' pipeline gives them."""

    manifest = _nemo_manifest(tmp_path)

    def build(device_id):
        return _nemo_pipe(manifest, device_id, lambda audio, idx: (idx,))

    want_audio, want_idx = [], []
    cpu = build(None)
    for _ in range(4):
        audio, idx = cpu.run()
        want_audio += [np.asarray(x).tobytes() for x in audio]
        want_idx += [np.asarray(x).tolist() for x in idx]
    sent = _record_copies(monkeypatch, fake_cupy)
    gpu = build(0)
    got_idx = []
    for _ in range(4):
        _, idx = gpu.run()
        got_idx += [np.asarray(x).tolist() for x in idx]
    assert [b for _, b in sent] == want_audio  # each utterance uploaded in place
    assert got_idx == want_idx
    assert fake_cupy.COUNTS["host_register"] == 1  # the upload area, page-locked once
    cpu.close()
    gpu.close()


@pytest.mark.skipif(not ipc_process.supported(), reason="helpers need Linux memfd")
def test_audio_a_cpu_operator_of_the_part_also_takes_goes_up_from_the_area(
    fake_cupy,  # noqa: F811
    monkeypatch,
    tmp_path,
):
    """NeMo's training graph: ``nonsilent_region`` of the reader's audio runs in the sample
    processes beside the reader, and outside them only ``.gpu()`` takes the audio. Taken
    inside the part does not count: the audio still goes up from the upload area, with no
    copy on the pipeline's side, and the region's bounds come back as the threads give them."""

    manifest = _nemo_manifest(tmp_path)

    def build(device_id):
        return _nemo_pipe(
            manifest, device_id, lambda audio, idx: fn.nonsilent_region(audio, cutoff_db=-60)
        )

    want_audio, want_roi = [], []
    cpu = build(None)
    for _ in range(4):
        audio, begin, length = cpu.run()
        want_audio += [np.asarray(x).tobytes() for x in audio]
        want_roi += [
            (int(np.asarray(b)), int(np.asarray(n))) for b, n in zip(begin, length, strict=True)
        ]
    sent = _record_copies(monkeypatch, fake_cupy)
    shared = []
    real_unpack = UploadArea.unpack
    monkeypatch.setattr(UploadArea, "unpack", lambda *a: shared.append(1) or real_unpack(*a))
    gpu = build(0)
    got_roi = []
    for _ in range(4):
        _, begin, length = gpu.run()
        got_roi += [
            (int(np.asarray(b)), int(np.asarray(n))) for b, n in zip(begin, length, strict=True)
        ]
    assert [b for _, b in sent] == want_audio  # each utterance uploaded in place
    assert len(shared) >= 4  # every reply unpacked from the upload area
    assert got_roi == want_roi
    cpu.close()
    gpu.close()
