"""readers.numpy(device="gpu") as a graph: the reader stays a CPU node (named, with its reader
metadata) and its output goes to the GPU through one batch copy."""

from __future__ import annotations

import numpy as np

from dlpipe import Pipeline, fn


def test_gpu_reader_is_a_cpu_read_then_one_upload(tmp_path):
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", np.full((2, 3), i, np.int16))
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        out = fn.readers.numpy(file_root=str(tmp_path), device="gpu", name="Reader")
    assert out.device == "gpu"
    copy = out.source
    assert copy.op.schema == "_copy_to_gpu"
    (read,) = copy.inputs
    assert read.device == "cpu" and read.source.name == "Reader"
    assert read.source.op.schema == "readers.numpy"
