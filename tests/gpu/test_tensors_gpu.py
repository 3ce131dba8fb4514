"""TensorListGPU interop, the .gpu() copy, device selection and memory over many iterations."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import DeviceError, Pipeline, fn  # noqa: E402
from dlpipe.tensors import TensorListCPU  # noqa: E402


def _pipe(image_root, batch=4, **kw):
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=0, seed=2, **kw)
    with pipe:
        jpegs, labels = fn.readers.file(file_root=image_root)
        img = fn.decoders.image(jpegs)  # CPU
        small = fn.resize(img, size=(16, 24))
        pipe.set_outputs(small.gpu(), small, img.gpu(), labels.gpu())
    return pipe


def test_gpu_copy_dense_and_ragged(image_root):
    pipe = _pipe(image_root)
    for _ in range(3):
        g, c, ragged, labels = pipe.run()
        assert type(c) is TensorListCPU
        assert g.is_dense_tensor() and g.layout() == "HWC"
        np.testing.assert_array_equal(g.as_cpu().as_array(), c.as_array())
        np.testing.assert_array_equal(cupy.asnumpy(g.at(1)), c.at(1))
        assert not ragged.is_dense_tensor() or len(set(ragged.shape())) == 1
        host = ragged.as_cpu()
        assert [host.at(i).shape for i in range(len(host))] == ragged.shape()
        assert len(labels) == 4 and len(labels.as_cpu()) == 4


def test_as_tensor_cuda_array_interface_and_cupy(image_root):
    pipe = _pipe(image_root)
    g, c, _, _ = pipe.run()
    t = g.as_tensor()
    assert t.shape() == [4, 16, 24, 3]
    arr = cupy.asarray(t)
    np.testing.assert_array_equal(cupy.asnumpy(arr), c.as_array())
    arr2 = cupy.asarray(g)  # the TensorList itself exposes __cuda_array_interface__
    np.testing.assert_array_equal(cupy.asnumpy(arr2), c.as_array())
    assert g.__dlpack_device__() == (2, 0)


def test_torch_from_dlpack_on_another_stream(image_root):
    torch = pytest.importorskip("torch")
    pipe = _pipe(image_root)
    s = torch.cuda.Stream()
    for _ in range(4):
        g, c, _, _ = pipe.run()
        with torch.cuda.stream(s):
            t = torch.from_dlpack(g)  # s waits on the batch's event
            total = (t.to(torch.int64) + 0).sum()
        s.synchronize()
        assert int(total) == int(c.as_array().astype(np.int64).sum())
        assert t.shape == (4, 16, 24, 3) and t.device.type == "cuda"


def test_batch_memory_survives_while_held(image_root):
    pipe = _pipe(image_root)
    held = []
    for _ in range(6):
        g, c, _, _ = pipe.run()
        held.append((g, c.as_array().copy()))
    for g, want in held:  # later iterations did not overwrite earlier batches
        np.testing.assert_array_equal(g.as_cpu().as_array(), want)


def test_memory_flat_over_many_iterations(image_root):
    pipe = _pipe(image_root, prefetch_queue_depth=2)
    pool = cupy.get_default_memory_pool()
    for _ in range(10):
        pipe.run()
    cupy.cuda.runtime.deviceSynchronize()
    base = pool.total_bytes()
    free, total = cupy.cuda.runtime.memGetInfo()
    base_used = total - free  # every allocator: CuPy's pool, nvImageCodec's, the driver's
    for _ in range(50 * 8):  # 50 epochs of the 32-image set in batches of 4
        pipe.run()
    cupy.cuda.runtime.deviceSynchronize()
    assert pool.total_bytes() <= base * 1.1 + (1 << 20)
    free, total = cupy.cuda.runtime.memGetInfo()
    assert total - free <= base_used + (32 << 20)


def test_device_id_selection(image_root):
    pipe = _pipe(image_root)
    g, *_ = pipe.run()
    assert g.device_id() == 0 and g.at(0).device.id == 0
    n = cupy.cuda.runtime.getDeviceCount()
    bad = Pipeline(batch_size=2, num_threads=1, device_id=n)
    with bad:
        jpegs, _ = fn.readers.file(file_root=image_root)
        bad.set_outputs(jpegs.gpu())
    with pytest.raises(DeviceError, match=f"device_id={n}"):
        bad.build()


def test_device_id_none_uses_current_device(image_root):
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        pipe.set_outputs(fn.decoders.image(jpegs).gpu())
    (g,) = pipe.run()
    assert g.device_id() == cupy.cuda.runtime.getDevice()


@pytest.mark.multi_gpu
def test_second_device(image_root):
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs")
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=1)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        pipe.set_outputs(fn.resize(fn.decoders.image(jpegs, device="mixed"), size=(8, 8)))
    (g,) = pipe.run()
    assert g.device_id() == 1 and g.at(0).device.id == 1


def test_synchronous_pipeline_runs_the_gpu_stage_in_the_caller(image_root):
    pipe = _pipe(image_root, exec_async=False, exec_pipelined=False)
    for _ in range(2):
        g, c, _, _ = pipe.run()
        np.testing.assert_array_equal(g.as_cpu().as_array(), c.as_array())


def test_tensorlistgpu_from_user_arrays():
    from dlpipe import PipelineError
    from dlpipe.tensors_gpu import TensorListGPU

    dense = cupy.arange(24, dtype=cupy.float32).reshape(2, 3, 4)
    tl = TensorListGPU(dense, "HW")
    assert len(tl) == 2 and tl.shape() == [(3, 4), (3, 4)] and tl.is_dense_tensor()
    np.testing.assert_array_equal(tl.as_cpu().as_array(), cupy.asnumpy(dense))
    ragged = TensorListGPU([cupy.zeros((2, 2), cupy.uint8), cupy.ones((3, 1), cupy.uint8)])
    assert not ragged.is_dense_tensor()
    assert [x.shape for x in ragged.as_cpu()._samples] == [(2, 2), (3, 1)]
    with pytest.raises(PipelineError, match="same shape"):
        ragged.as_tensor()
    with pytest.raises(IndexError):
        ragged[2]


@pytest.mark.parametrize("make", [np.asarray, cupy.asarray], ids=["numpy", "cupy"])
def test_feed_input_to_a_gpu_external_source(make):
    # DALI's feed_input on device="gpu": each fed batch (host or CuPy arrays, ragged) comes
    # out on the GPU, in order, and through a GPU operator as on the CPU.
    rng = np.random.default_rng(2)
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=0, prefetch_queue_depth=1)
    with pipe:
        x = fn.external_source(name="x", device="gpu", layout="HWC")
        pipe.set_outputs(x, fn.flip(x, horizontal=1))
    for k in range(4):
        want = [rng.integers(0, 256, (4 + i + k, 5, 3), dtype=np.uint8) for i in range(3)]
        pipe.feed_input("x", [make(a) for a in want])
        out, flipped = pipe.run()
        assert out.layout() == "HWC"
        for i, a in enumerate(want):
            np.testing.assert_array_equal(out.as_cpu().at(i), a)
            np.testing.assert_array_equal(flipped.as_cpu().at(i), a[:, ::-1])
    pipe.close()


@pytest.mark.parametrize("ragged", [False, True], ids=["dense", "ragged"])
def test_gpu_external_source_copies_device_arrays_in_one_batch(ragged):
    # CuPy arrays of a GPU external source are copied with one batched kernel: strided views
    # (made contiguous first), empty samples and float data come out equal, and the output
    # does not alias the source's arrays (overwriting them later leaves the batch unchanged).
    rng = np.random.default_rng(5)
    shapes = [(6 + 5 * i * ragged, 9, 3) for i in range(4)]
    host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if ragged:
        host[2] = host[2][:0]
    arrays = [cupy.asarray(a) for a in host]
    wide = cupy.asarray(np.repeat(host[1], 2, axis=1))
    arrays[1] = wide[:, ::2]  # a strided view
    assert not arrays[1].flags.c_contiguous
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=0, prefetch_queue_depth=1)
    with pipe:
        pipe.set_outputs(fn.external_source(source=lambda: arrays, device="gpu", batch=True))
    pipe.build()
    (out,) = pipe.run()
    assert out.is_dense_tensor() == (not ragged)
    for i, want in enumerate(host):
        np.testing.assert_array_equal(out.as_cpu().at(i), want)
    for a in arrays:
        a.fill(-1)
    cupy.cuda.runtime.deviceSynchronize()
    for i, want in enumerate(host):
        np.testing.assert_array_equal(out.as_cpu().at(i), want)
    pipe.close()


def test_ragged_copies_reuse_pinned_blocks():
    """A ragged batch's total differs every batch (speech): its pinned staging comes in size
    classes, so CuPy's pool reuses freed blocks instead of pinning new memory each batch and
    keeping every old block."""
    import cupy

    from dlpipe.operators._copy import CopyToGpu

    op = CopyToGpu(device="mixed")
    pool = cupy.get_default_pinned_memory_pool()
    pool.free_all_blocks()
    rng = np.random.default_rng(0)
    stream = cupy.cuda.Stream(non_blocking=True)
    for _ in range(40):
        samples = [rng.random(int(n), np.float32) for n in rng.integers(200_000, 260_000, 16)]
        out = op.run_batch([samples], {}, None, stream)
        stream.synchronize()
        for a, b in zip(samples, out, strict=True):
            np.testing.assert_array_equal(a, cupy.asnumpy(b))
    op._pending.clear()
    assert pool.n_free_blocks() <= 4
