"""Host helpers of the GPU launchers (no GPU needed)."""

from __future__ import annotations

import numpy as np

from dlpipe.kernels._batch import uniform_rows


def test_uniform_rows_is_rows_all_equal():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, d = rng.integers(1, 6), rng.integers(0, 4)
        a = rng.integers(0, 2, (n, d)).astype(np.int64)
        assert uniform_rows(a) == bool((a == a[0]).all())
        b = np.tile(a[:1], (n, 1))
        assert uniform_rows(b)
        assert uniform_rows(b[:, ::-1])  # a strided view
    assert not uniform_rows(np.array([[224, 224, 3], [224, 3, 224]], np.int64))
