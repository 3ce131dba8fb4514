"""GPU side of DALI's client tensor API: ``TensorGPU``/``TensorListGPU.copy_to_external`` into
raw device memory, ``feed_ndarray`` into CUDA torch tensors, ragged GPU outputs."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn  # noqa: E402


def gpu_pipe():
    boxes = [np.arange(k * 4, dtype=np.float32).reshape(k, 4) + k for k in (2, 0, 5)]
    imgs = np.arange(3 * 4 * 6, dtype=np.uint8).reshape(3, 4, 6)
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=0)
    with pipe:
        b = fn.external_source(source=[boxes])
        x = fn.external_source(source=[imgs])
        pipe.set_outputs(b.gpu(), x.gpu())
    return pipe, boxes, imgs


def test_copy_to_external_device_memory():
    pipe, boxes, imgs = gpu_pipe()
    gb, gx = pipe.run()
    flat = cupy.full((7, 4), -1, np.float32)
    gb.copy_to_external(ctypes.c_void_p(flat.data.ptr))  # ragged: samples back to back
    np.testing.assert_array_equal(flat.get(), np.concatenate(boxes))
    one = cupy.zeros((5, 4), np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    gb[2].copy_to_external(one.data.ptr, cuda_stream=stream.ptr, non_blocking=True)
    stream.synchronize()
    np.testing.assert_array_equal(one.get(), boxes[2])
    t = gx.as_tensor()
    assert t.shape() == [3, 4, 6]
    dense = cupy.zeros((3, 4, 6), np.uint8)
    t.copy_to_external(dense.data.ptr)
    np.testing.assert_array_equal(dense.get(), imgs)
    pipe.close()


def test_feed_ndarray_and_ragged_iterator_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    from dlpipe.plugins.pytorch import DALIRaggedIterator, feed_ndarray, to_torch_type

    pipe, boxes, imgs = gpu_pipe()
    gb, gx = pipe.run()
    t = gx.as_tensor()
    dst = torch.empty(t.shape(), dtype=to_torch_type[t.dtype], device="cuda:0")
    feed_ndarray(t, dst, cuda_stream=torch.cuda.current_stream())
    np.testing.assert_array_equal(dst.cpu().numpy(), imgs)
    one = torch.empty((5, 4), dtype=torch.float32, device="cuda:0")
    feed_ndarray(gb[2], one)
    np.testing.assert_array_equal(one.cpu().numpy(), boxes[2])
    pipe.close()
    pipe, boxes, imgs = gpu_pipe()
    it = DALIRaggedIterator(
        pipe, ["boxes", "images"], size=3, output_types=["sparse_list", "dense"]
    )
    (batch,) = next(it)
    assert [tuple(b.shape) for b in batch["boxes"]] == [(2, 4), (0, 4), (5, 4)]
    assert batch["boxes"][2].device.type == "cuda"
    np.testing.assert_array_equal(batch["boxes"][2].cpu().numpy(), boxes[2])
    np.testing.assert_array_equal(batch["images"].cpu().numpy(), imgs)
