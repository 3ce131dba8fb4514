"""Every graph with mixed operators runs its mixed stage in lanes (core/executor_gpu.py): the
``.gpu()`` copies of labels, a GPU ``external_source`` fed device arrays, several decoders.
Each produces what the same graph gives on one stream (``max_streams=1``)."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import Pipeline, fn, pipeline_def

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")


def _epoch(pipe, n):
    out = []
    for _ in range(n):
        out.append([[np.asarray(tl.as_cpu().at(i)) for i in range(len(tl))] for tl in pipe.run()])
    return out


@pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=5)
def _labels_on_gpu(root):
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
    images = fn.decoders.image(jpegs, device="mixed")
    crops = fn.decoders.image_random_crop(jpegs, device="mixed")  # a second decoder
    return fn.resize(images, size=(32, 32)), fn.resize(crops, size=(16, 16)), labels.gpu()


def test_labels_gpu_and_two_decoders_run_in_lanes(image_root):
    lanes = _labels_on_gpu(image_root)
    serial = _labels_on_gpu(image_root, max_streams=1)
    lanes.build(), serial.build()
    assert lanes._executor.gpu_stage.lanes >= 2
    assert serial._executor.gpu_stage.lanes == 0
    got, want = _epoch(lanes, 6), _epoch(serial, 6)
    for g, w in zip(got, want, strict=True):
        for go, wo in zip(g, w, strict=True):
            for a, b in zip(go, wo, strict=True):
                np.testing.assert_array_equal(a, b)
    assert got[0][2][0].dtype == np.int32 and got[0][2][0].shape == (1,)
    lanes.close(), serial.close()


def test_gpu_external_source_keeps_device_arrays_and_copies_them():
    """Device arrays fed to a GPU source arrive unchanged, and the pipeline's batch does not
    alias them: the source may overwrite its buffer right after."""
    rng = np.random.default_rng(0)
    host = [rng.integers(0, 255, (3, 5 + i, 3), dtype=np.uint8) for i in range(4)]
    dense = rng.random((4, 6, 2), dtype=np.float32)
    buffers = [cupy.asarray(a) for a in host]
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=0, prefetch_queue_depth=1)
    with pipe:
        ragged = fn.external_source(source=lambda: buffers, device="gpu")
        flat = fn.external_source(source=lambda: cupy.asarray(dense), device="gpu")
        pipe.set_outputs(ragged, flat)
    pipe.build()
    assert pipe._executor.gpu_stage.lanes >= 1
    out_ragged, out_flat = pipe.run()
    for b in buffers:
        b.fill(0)  # the source reuses its memory
    for i, a in enumerate(host):
        np.testing.assert_array_equal(cupy.asnumpy(out_ragged.at(i)), a)
    np.testing.assert_array_equal(cupy.asnumpy(out_flat.as_tensor().as_cupy()), dense)
    pipe.close()
