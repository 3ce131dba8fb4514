"""Device batches of 1 MiB and more take a size class of CuPy's pool (``kernels._batch``):
their memory is rounded up, their shapes, dtypes and sample layout are not."""

from __future__ import annotations

import numpy as np
import pytest
from test_gpu_host_batching import fake_cupy  # noqa: F401 (the fixture)


@pytest.mark.parametrize("ragged", [False, True])
def test_large_batches_take_rounded_blocks_small_ones_exact(fake_cupy, monkeypatch, ragged):  # noqa: F811
    from dlpipe.kernels import _batch

    asked = []
    real_alloc = fake_cupy.cuda.alloc
    monkeypatch.setattr(fake_cupy.cuda, "alloc", lambda n: asked.append(n) or real_alloc(n))
    lengths = [300_001, 250_000, 299_999] if ragged else [300_001] * 3
    shapes = np.array([[n] for n in lengths], np.int64)
    out = _batch.alloc_batch(shapes, np.float32, 0)
    assert [tuple(s) for s in out.shapes] == [(n,) for n in lengths]
    assert out.dtype == np.float32
    need = _batch.ragged_layout(shapes, 4)[1] if ragged else 4 * sum(lengths)
    assert len(asked) == 1 and asked[0] == _batch.round_up_eighth(need) > need
    assert asked[0] - need <= need // 8
    small = _batch.alloc_batch(np.array([[1000], [999]], np.int64), np.float32, 0)
    assert len(asked) == 1 and len(small) == 2  # under 1 MiB: cupy.empty, CuPy's rounding
