"""GPU-stage graph checks that need no GPU (they run in CI too)."""

from __future__ import annotations

import pytest

from dlpipe import Pipeline, PipelineError, fn
from dlpipe.executor_gpu import check_gpu_inputs


def test_gpu_operator_with_a_cpu_input_is_refused(image_root):
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=image_root)
        images = fn.decoders.image(jpegs)
        fn.resize(images, size=(8, 8), device="gpu")
        fn.resize(images.gpu(), size=(8, 8))
    bad, good = [n for n in pipe._ops if n.op.schema == "resize"]
    with pytest.raises(PipelineError, match=r"resize .* is a CPU node: .*\.gpu\(\)"):
        check_gpu_inputs([bad])
    check_gpu_inputs([good])


def test_import_of_the_gpu_stage_needs_no_cuda_library():
    import subprocess
    import sys

    code = "import dlpipe.executor_gpu, sys; print('cupy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
