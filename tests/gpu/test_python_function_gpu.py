"""fn.python_function / fn.dl_tensor_python_function on the GPU: CuPy arrays in and out, per
sample and per batch, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn  # noqa: E402

N = 4
XS = [np.arange((i + 1) * 3, dtype=np.float32).reshape(i + 1, 3) for i in range(N)]


def run(build):
    pipe = Pipeline(batch_size=N, num_threads=2, device_id=0, seed=1)
    with pipe:
        x = fn.external_source(source=lambda: XS, batch=True).gpu()
        outs = build(x)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    return [o.as_cpu() for o in pipe.run()]


def test_cupy_per_sample_and_batch():
    def per_sample(a):
        assert isinstance(a, cupy.ndarray)
        return cupy.sqrt(a) + 1

    def per_batch(batch):
        return [a.sum(axis=0) for a in batch]

    s, b = run(
        lambda x: (
            fn.python_function(x, function=per_sample, device="gpu"),
            fn.python_function(x, function=per_batch, batch_processing=True, device="gpu"),
        )
    )
    for i in range(N):
        np.testing.assert_allclose(s.at(i), np.sqrt(XS[i]) + 1, rtol=1e-6)
        np.testing.assert_allclose(b.at(i), XS[i].sum(axis=0), rtol=1e-6)


def test_dl_tensor_on_the_gpu():
    def f(batch):
        return [(cupy.from_dlpack(c) * 2).toDlpack() for c in batch]

    (out,) = run(lambda x: fn.dl_tensor_python_function(x, function=f, device="gpu"))
    for i in range(N):
        np.testing.assert_array_equal(out.at(i), XS[i] * 2)
