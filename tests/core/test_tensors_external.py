"""DALI's client-side tensor API on CPU batches: ``as_tensor()`` (``shape()``, ``dtype``,
layout) and ``copy_to_external`` into raw host memory (int or ``ctypes.c_void_p``)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from dlpipe import Pipeline, PipelineError, fn, types
from dlpipe.tensors import TensorCPU, TensorListCPU


def test_as_tensor_is_a_dali_tensor_sharing_the_batch():
    arr = np.arange(24, dtype=np.int16).reshape(4, 3, 2)
    tl = TensorListCPU(arr, layout="HW")
    t = tl.as_tensor()
    assert isinstance(t, TensorCPU)
    assert t.shape() == [4, 3, 2] and t.dtype == types.INT16 and t.layout() == "NHW"
    assert np.asarray(t) is arr and t.ndim() == 3
    np.testing.assert_array_equal(np.from_dlpack(t), arr)
    ragged = TensorListCPU([np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32)])
    with pytest.raises(PipelineError, match="same shape"):
        ragged.as_tensor()


@pytest.mark.parametrize("as_pointer", [int, ctypes.c_void_p])
def test_copy_to_external_of_tensors_and_lists(as_pointer):
    samples = [np.arange(k * 4, dtype=np.float32).reshape(k, 4) + 100 * k for k in (2, 0, 3)]
    tl = TensorListCPU(samples)
    out = np.full(20, -1, np.float32)
    tl.copy_to_external(as_pointer(out.ctypes.data))  # ragged: one sample after the other
    np.testing.assert_array_equal(out, np.concatenate([s.reshape(-1) for s in samples]))
    one = np.zeros((3, 4), np.float32)
    tl[2].copy_to_external(as_pointer(one.ctypes.data))
    np.testing.assert_array_equal(one, samples[2])
    dense = TensorListCPU(np.arange(12, dtype=np.uint8).reshape(3, 4)[:, ::-1])  # strided
    got = np.zeros((3, 4), np.uint8)
    dense.as_tensor().copy_to_external(got.ctypes.data)
    np.testing.assert_array_equal(got, np.arange(12, dtype=np.uint8).reshape(3, 4)[:, ::-1])
    with pytest.raises(PipelineError, match="NULL"):
        tl.copy_to_external(ctypes.c_void_p(None))


def test_pipeline_outputs_copy_out_as_a_dali_client_does():
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None)
    data = [np.full((k, 4), k, np.float32) for k in (1, 4, 2)]
    with pipe:
        pipe.set_outputs(fn.external_source(source=[data]))
    (boxes,) = pipe.run()
    offsets = [0]
    for k in range(len(boxes)):
        shape = boxes[k].shape()  # DeepLearningExamples' SSD iterator: a list per sample
        assert isinstance(shape, list) and shape == [len(data[k]), 4]
        offsets.append(offsets[-1] + shape[0])
    buf = np.zeros((offsets[-1], 4), np.float32)
    for k in range(len(boxes)):
        boxes[k].copy_to_external(buf[offsets[k] : offsets[k + 1]].ctypes.data)
    np.testing.assert_array_equal(buf, np.concatenate(data))
    pipe.close()
