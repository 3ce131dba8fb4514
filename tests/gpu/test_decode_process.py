"""The mixed decoder's decode process (core/decoders/_decode_process.py): the same pixels as
decoding in the pipeline's process, held batches never overwritten, slots that grow, and a
server that fails to start or dies."""

from __future__ import annotations

import os
import signal

import cv2
import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")
pytest.importorskip("nvidia.nvimgcodec")

from dlpipe import Pipeline, PipelineError, fn, types  # noqa: E402
from dlpipe.synthetic import make_dataset  # noqa: E402


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("dp"))
    return make_dataset(path, num_classes=2, per_class=8, size_range=(150, 420), seed=21)


def _decode_pipe(root, batch=4, max_streams=-1, crop=False, threads=4, **dec):
    pipe = Pipeline(
        batch_size=batch, num_threads=threads, device_id=0, seed=3, max_streams=max_streams
    )
    with pipe:
        jpegs, labels = fn.readers.file(file_root=root, name="r")
        if crop:
            images = fn.decoders.image_random_crop(jpegs, device="mixed", **dec)
        else:
            images = fn.decoders.image(jpegs, device="mixed", **dec)
        pipe.set_outputs(images, labels)
    return pipe


def _procs(pipe):
    (dec,) = [n.op for n in pipe._ops if n.op.schema.startswith("decoders.image")]
    return dec.gpu_impl()


def _host(batch):
    cpu = batch.as_cpu()
    return [np.array(cpu.at(i)) for i in range(len(cpu))]


@pytest.mark.parametrize("output_type", [types.RGB, types.BGR, types.GRAY])
@pytest.mark.parametrize("crop", [False, True])
def test_same_pixels_as_decoding_in_the_pipelines_process(root, monkeypatch, output_type, crop):
    # hw_decoder_load=0: the hybrid and CUDA backends, which round the same in every process
    kw = {"output_type": output_type, "hw_decoder_load": 0.0, "crop": crop}
    with_proc = _decode_pipe(root, **kw)
    monkeypatch.setenv("DLPIPE_DECODE_PROCESS", "0")
    without = _decode_pipe(root, **kw)
    for _ in range(5):
        a, b = _host(with_proc.run()[0]), _host(without.run()[0])
        for x, y in zip(a, b, strict=True):
            assert x.shape[2] == (1 if output_type == types.GRAY else 3)
            np.testing.assert_array_equal(x, y)
    assert _procs(with_proc).use_process and _procs(with_proc)._procs
    assert not _procs(without).use_process
    with_proc.close()
    without.close()


def test_batches_are_decoded_where_the_reader_put_them_or_through_a_copy(root, monkeypatch):
    from dlpipe.decoders import _decode_process

    kw = {"hw_decoder_load": 0.0}
    in_place = _decode_pipe(root, **kw)
    a = [_host(in_place.run()[0]) for _ in range(6)]
    procs = _procs(in_place)._procs
    assert any(p._mapped.answers for p in procs)  # the servers mapped the read processes' slots
    assert all(ok is True for p in procs for ok in p._mapped.answers.values())
    monkeypatch.setattr(_decode_process, "locate", lambda bufs: None)  # as if not found
    copied = _decode_pipe(root, **kw)
    b = [_host(copied.run()[0]) for _ in range(6)]
    assert not any(p._mapped.answers for p in _procs(copied)._procs)
    for x, y in zip(sum(a, []), sum(b, []), strict=True):
        np.testing.assert_array_equal(x, y)
    in_place.close()
    copied.close()


def test_held_batches_are_not_overwritten(root, monkeypatch):
    """Every batch of two epochs, held until the end, against the same batches copied to the
    host as they came out of a pipeline that decodes without decode processes."""
    pipe = _decode_pipe(root, 3)
    held = [pipe.run()[0] for _ in range(11)]
    monkeypatch.setenv("DLPIPE_DECODE_PROCESS", "0")
    ref = _decode_pipe(root, 3, hw_decoder_load=0.9)
    want = [_host(ref.run()[0]) for _ in range(11)]
    for batch, expect in zip(held, want, strict=True):
        for x, y in zip(_host(batch), expect, strict=True):
            assert x.shape == y.shape
            assert np.abs(x.astype(int) - y).mean() < 2  # hardware vs hybrid rounding only
    # each held batch took a slot of its own (its samples' owner is the slot's lease)
    slots = {id(o.slot) for b in held for o in b._samples.owners if o is not None}
    assert len(slots) == len(held)
    pipe.close()
    ref.close()


def test_a_slot_grows_for_images_bigger_than_estimated(tmp_path):
    # Flat 1200x1000 JPEGs compress about 200:1, far past the first slot's estimate (12 times
    # the encoded bytes): the server keeps the images and copies them into a larger slot.
    os.makedirs(tmp_path / "a")
    colours = [(10, 200, 30), (250, 5, 128), (0, 0, 0), (255, 255, 255)]
    for i, c in enumerate(colours):
        img = np.empty((1200, 1000, 3), np.uint8)
        img[:] = c
        cv2.imwrite(str(tmp_path / "a" / f"{i}.jpg"), img)
    pipe = _decode_pipe(str(tmp_path), batch=4, max_streams=1)
    for _ in range(3):
        batch = pipe.run()[0]
        for x, c in zip(_host(batch), colours, strict=True):
            assert x.shape == (1200, 1000, 3)
            # cv2 wrote BGR; the decoder gives RGB
            assert np.abs(x.reshape(-1, 3).mean(0) - np.array(c[::-1])).max() < 2
    # the last batch lies in one slot that holds all four images (the process may keep
    # smaller free slots of an earlier pipeline: it came from the pool)
    memory = batch._samples.owners[0].slot.memory
    assert all(o.slot.memory is memory for o in batch._samples.owners)
    assert memory.ptr <= int(batch._samples.ptrs[0]) < memory.ptr + memory.size
    assert memory.size >= 4 * 1200 * 1000 * 3
    pipe.close()


def test_a_server_that_does_not_start_falls_back_with_a_warning(root, monkeypatch):
    from dlpipe.decoders import _decode_process

    monkeypatch.setattr(_decode_process, "_SERVER", "dlpipe.decoders._no_such_module")
    monkeypatch.setattr(_decode_process, "_IDLE", {})  # no idle process of an earlier test
    pipe = _decode_pipe(root)
    with pytest.warns(RuntimeWarning, match="decode process did not start"):
        out = _host(pipe.run()[0])
    assert len(out) == 4 and all(x.ndim == 3 and x.shape[2] == 3 for x in out)
    assert not _procs(pipe).use_process
    pipe.run()
    pipe.close()
    assert not _decode_process._IDLE[0]  # the failed processes were not kept


def test_a_killed_server_is_an_error_not_a_hang(root):
    pipe = _decode_pipe(root, max_streams=1, hybrid_huffman_threshold=123458)
    pipe.run()
    (proc,) = _procs(pipe)._procs
    os.kill(proc._helper.pid, signal.SIGKILL)
    proc._helper._proc.wait()
    with pytest.raises(PipelineError, match="decode process exited unexpectedly"):
        for _ in range(4):  # batches already decoded may come first
            pipe.run()
    pipe.close()


def test_closed_pipelines_hand_their_processes_to_the_next(root):
    from dlpipe.decoders import _decode_process

    pipe = _decode_pipe(root)
    pipe.run()
    pids = {p._helper.pid for p in _procs(pipe)._procs}
    assert len(pids) == len(_procs(pipe)._procs) >= 1
    pipe.close()
    idle = _decode_process._IDLE[0]
    idle_pids = {p._helper.pid for p in idle}
    assert pids <= idle_pids  # given back, their free slots freed
    assert all(not p.idle_slots() for p in idle)  # slots of batches still held come later
    again = _decode_pipe(root, crop=True, output_type=types.GRAY)  # another configuration
    out = _host(again.run()[0])
    assert all(x.shape[2] == 1 for x in out)
    used = {p._helper.pid for p in _procs(again)._procs}
    assert used <= idle_pids and not used.isdisjoint(pids)  # none started for it
    again.close()
    assert len(_decode_process._IDLE[0]) <= _decode_process.IDLE_PROCESSES


def test_three_decode_lanes_by_default_with_processes_two_without(root, monkeypatch):
    pipe = _decode_pipe(root, threads=16)
    pipe.build()
    assert pipe._executor.gpu_stage.lanes == 3
    pipe.close()
    # two when three would leave each lane's decoder fewer than 3 of the pipeline's threads
    pipe = _decode_pipe(root, threads=8)
    pipe.build()
    assert pipe._executor.gpu_stage.lanes == 2
    pipe.close()
    monkeypatch.setenv("DLPIPE_DECODE_PROCESS", "0")
    pipe = _decode_pipe(root)
    pipe.build()
    assert pipe._executor.gpu_stage.lanes == 2
    pipe.close()


def test_a_decode_process_loads_neither_opencv_nor_pillow(root):
    # started as every helper is (_ipc/boot.py): the libraries mapped in it are CUDA's,
    # nvImageCodec's and numpy's, not OpenCV's or Pillow's
    pipe = _decode_pipe(root, max_streams=2)
    pipe.run()
    procs = _procs(pipe)._procs
    assert procs
    for proc in procs:
        with open(f"/proc/{proc._helper.pid}/maps") as f:
            maps = f.read()
        assert "nvimgcodec" in maps
        # nvImageCodec's own codec extensions (e.g. extensions/libopencv_ext.so) are its own
        # libraries, not the opencv-python or Pillow packages the pipeline's process loads
        mapped = {line.split()[-1] for line in maps.splitlines() if "/" in line}
        others = [m for m in mapped if "/nvimgcodec/" not in m]
        assert not [m for m in others if "cv2" in m or "/PIL" in m or "opencv" in m], others
    pipe.close()


def test_the_decode_server_lowers_the_stack_limit():
    """The server's context reserves local memory at a 256-byte stack limit, not the 1 KB
    default (~200 MiB less per decode process on an H100); decoding still works under it."""
    from dlpipe.decoders._decode_server import STACK_BYTES, Server

    fd = os.memfd_create("stack-test")
    try:
        Server(0, fd)
        assert cupy.cuda.runtime.deviceGetLimit(0x00) == STACK_BYTES
        # a kernel that needs more stack still runs: the driver raises the limit itself
        x = cupy.arange(1 << 16, dtype=cupy.float64)
        assert float(cupy.sort(x)[-1]) == (1 << 16) - 1
    finally:
        os.close(fd)


def _server_batch(paths, output_type="RGB"):
    """A decode server in this process with one slot of ``nbytes`` and the files of ``paths``
    written to its memfd, as the pipeline's process would."""
    from dlpipe.decoders._decode_server import Configure, Server

    blobs = [np.fromfile(p, np.uint8) for p in paths]
    fd = os.memfd_create("direct-test")
    os.pwritev(fd, blobs, 0)
    server = Server(0, fd)
    config = {"load": 0.0, "options": "", "threads": 2, "output_type": output_type}
    server.handle(Configure(config))
    return server, fd, [b.nbytes for b in blobs]


def _slot(server, key, nbytes):
    memory = cupy.cuda.Memory(nbytes)
    server.slots[key] = (memory.ptr, nbytes)  # this process's own memory: no IPC handle
    return memory


def _at(memory, offset, shape):
    flat = cupy.ndarray((memory.size,), cupy.uint8, cupy.cuda.MemoryPointer(memory, 0))
    return cupy.asnumpy(flat[int(offset) : int(offset) + int(np.prod(shape))].reshape(shape))


def test_the_server_decodes_straight_into_the_slot_and_keeps_no_images(root):
    """Shapes from the headers, the images decoded where the layout puts them (no images of
    the server's own: it keeps none for the next batch), the same pixels as the decoder gives
    by itself; a slot too small gets the exact size and the batch is decoded into the next."""
    from nvidia import nvimgcodec as nvi

    from dlpipe.decoders._codec import decode_params
    from dlpipe.decoders._decode_server import CopyInto, Decode, Decoded, TooSmall, pack

    paths = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg")
    )[:6]
    assert len(paths) == 6
    server, fd, sizes = _server_batch(paths)
    try:
        small = _slot(server, 0, 1024)
        reply = server.handle(Decode(0, sizes, None))
        assert isinstance(reply, TooSmall)
        arrays = [np.fromfile(p, np.uint8) for p in paths]  # alive while their streams are
        streams = [nvi.CodeStream(a) for a in arrays]
        shapes = np.array([(s.height, s.width, 3) for s in streams])
        assert reply.nbytes == pack(shapes)[1]  # exact: from the headers
        memory = _slot(server, 1, reply.nbytes)
        got = server.handle(CopyInto(1))
        assert isinstance(got, Decoded) and server.spare == [] and server.pending is None
        assert got.shapes.tolist() == shapes.tolist()
        assert got.offsets.tolist() == pack(shapes)[0].tolist()
        decoder = server.decoder
        ref = decoder.decode(streams, params=decode_params(nvi, types.RGB))
        server.stream.synchronize()
        for img, off, shape in zip(ref, got.offsets, got.shapes, strict=True):
            np.testing.assert_array_equal(_at(memory, off, shape), cupy.asnumpy(cupy.asarray(img)))
        del small
    finally:
        os.close(fd)


def test_an_image_turned_by_its_exif_orientation_is_decoded_in_its_place(tmp_path):
    from PIL import Image

    from dlpipe.decoders._decode_server import Decode, Decoded

    rng = np.random.default_rng(2)
    paths = []
    for i, orientation in enumerate([1, 6, 8, 3]):
        arr = (rng.random((120, 200, 3)) * 255).astype(np.uint8)
        arr = cv2.GaussianBlur(arr, (9, 9), 3)
        exif = Image.Exif()
        exif[0x0112] = orientation
        path = str(tmp_path / f"{i}.jpg")
        Image.fromarray(arr).save(path, quality=95, exif=exif)
        paths.append(path)
    server, fd, sizes = _server_batch(paths)
    try:
        memory = _slot(server, 0, 1 << 22)
        got = server.handle(Decode(0, sizes, None))
        assert isinstance(got, Decoded)
        for path, off, shape in zip(paths, got.offsets, got.shapes, strict=True):
            want = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)  # EXIF applied
            assert tuple(shape) == want.shape, path
            diff = np.abs(_at(memory, off, shape).astype(int) - want).mean()
            assert diff < 3, (path, diff)
    finally:
        os.close(fd)
