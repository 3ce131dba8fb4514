"""The descriptors of the fused slice kernel (``kernels/slice.py``: flip, crop_mirror_normalize,
cast, brightness_contrast) written as word columns equal, byte for byte, a field-by-field fill
with ``per_sample`` of each argument (what the launcher did before), on random arguments of every
accepted form: scalars, per-channel lists, per-sample arrays, (N, C) rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dlpipe.kernels._batch import per_sample
from dlpipe.kernels.slice import SLICE_DESC, slice_descriptors


def _reference(s, out, h, w, sy, sx, oh, ow, y0, x0, flip_x, flip_y, mean, mul, fill, shift):
    n = len(s)
    d = np.zeros(n, SLICE_DESC)
    d["in_ptr"] = s.ptrs.view(np.int64)
    d["out_ptr"] = out.ptrs.view(np.int64)
    d["in_h"], d["in_w"], d["in_sy"], d["in_sx"] = h, w, sy, sx
    d["out_h"], d["out_w"] = oh, ow
    d["y0"], d["x0"] = per_sample(y0, n, dtype=np.int64), per_sample(x0, n, dtype=np.int64)
    d["flip_x"] = per_sample(flip_x, n, dtype=np.int64) != 0
    d["flip_y"] = per_sample(flip_y, n, dtype=np.int64) != 0
    d["mean"] = per_sample(mean, n, 4)
    d["mul"] = per_sample(mul, n, 4)
    d["fill"] = per_sample(fill, n, 4)
    d["shift"] = per_sample(shift, n)
    return d


class _Samples(SimpleNamespace):
    def __len__(self):
        return len(self.ptrs)


def _forms(rng, n, kind):
    """One argument in a random accepted form."""
    form = rng.integers(0, 4)
    if kind == "int":
        return [0, int(rng.integers(-9, 9)), rng.integers(-50, 50, n), [int(rng.integers(9))]][form]
    if kind == "flag":
        return [0, 1, rng.integers(0, 2, n), rng.random(n) * 2][form]
    if kind == "shift":
        return [
            0.0,
            float(rng.normal()),
            rng.normal(size=n),
            rng.normal(size=n).astype(np.float32),
        ][form]
    c = int(rng.integers(1, 5))
    return [
        float(rng.normal()),
        rng.normal(size=c).tolist(),
        rng.normal(size=(n, c)).astype(np.float32),
        np.broadcast_to(rng.normal(size=c), (n, c)),
    ][form]


@pytest.mark.parametrize("seed", range(40))
def test_descriptors_equal_the_field_by_field_fill(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 20))
    s = _Samples(ptrs=rng.integers(0, 2**63, n, dtype=np.uint64))
    out = _Samples(ptrs=rng.integers(0, 2**63, n, dtype=np.uint64))
    geometry = [rng.integers(1, 1000, n) for _ in range(6)]
    args = [*(_forms(rng, n, k) for k in ("int", "int", "flag", "flag"))]
    args += [_forms(rng, n, "channels") for _ in range(3)] + [_forms(rng, n, "shift")]
    got = slice_descriptors(s, out, *geometry, *args)
    want = _reference(s, out, *geometry, *args)
    assert got.dtype == SLICE_DESC and got.tobytes() == want.tobytes()
