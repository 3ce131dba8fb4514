"""The host side of GPU normalize: broadcast strides and descriptors, run through a numpy model
of ``normalize_apply`` (normalize.cu) against the CPU operator."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.kernels.normalize import NORM_DESC, broadcast_strides, normalize_descriptors
from dlpipe.operators.normalize import Normalize


def test_broadcast_strides():
    np.testing.assert_array_equal(
        broadcast_strides([[1, 1, 3], [4, 5, 1], [2, 3, 4]]),
        [[0, 0, 1], [5, 1, 0], [12, 4, 1]],
    )


def model(d, x, mean_flat, dev_flat, scale, shift, eps, ddof):
    """What normalize_apply computes for one descriptor (float32 steps)."""
    nd = int(d["ndim"])
    shape = d["shape"][:nd]
    out = np.empty(int(d["size"]), np.float32)
    for i, c in enumerate(np.ndindex(*shape)):
        c = np.array(c)
        xv = np.float32(x.reshape(-1)[(c * d["in_strides"][:nd]).sum()])
        m = mean_flat[(c * d["mean_strides"][:nd]).sum()]
        sv = dev_flat[(c * d["dev_strides"][:nd]).sum()]
        if d["dev_is_sumsq"]:
            if d["count"] > ddof:
                var = np.float32(sv / (d["count"] - ddof))
            else:
                var = np.float32(0)
            var = np.float32(var + np.float32(eps))
            inv = np.float32(0) if var == 0 else np.float32(np.float32(scale) / np.sqrt(var))
        else:
            inv = np.float32(np.float32(scale) / sv) if sv != 0 else np.float32(0)
        y = np.float32(np.float32(xv - m) * inv)
        out[i] = np.float32(y + np.float32(shift)) if shift else y
    return out.reshape(shape)


@pytest.mark.parametrize("axes", [(0, 1), (2,), (0, 1, 2)])
def test_computed_statistics_match_the_cpu_operator(axes):
    rng = np.random.default_rng(len(axes))
    x = rng.integers(0, 255, (4, 5, 3)).astype(np.uint8)
    op = Normalize(axes=list(axes), scale=2.0, shift=1.0, epsilon=0.5, ddof=1)
    op.output_layouts(["HWC"])
    want = op.run_sample((x,), {}, None)
    keep = tuple(1 if d in axes else e for d, e in enumerate(x.shape))
    mean = (
        x.sum(axis=axes, keepdims=True, dtype=np.float64) / np.prod([x.shape[a] for a in axes])
    ).astype(np.float32)
    sumsq = ((x.astype(np.float64) - mean) ** 2).sum(axis=axes, keepdims=True)
    d = normalize_descriptors(
        [0],
        [0],
        [x.shape],
        [[15, 3, 1]],
        [0],
        [keep],
        [0],
        [keep],
        True,
        [int(np.prod([x.shape[a] for a in axes]))],
    )
    assert d.dtype == NORM_DESC
    got = model(d[0], x, mean.reshape(-1), sumsq.reshape(-1), 2.0, 1.0, 0.5, 1)
    np.testing.assert_array_equal(got, want)


def test_given_scalar_mean_and_stddev():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    op = Normalize(mean=3.0, stddev=2.0)
    op.output_layouts([""])
    want = op.run_sample((x,), {}, None)
    d = normalize_descriptors(
        [0], [0], [x.shape], [[4, 1]], [0], [[1, 1]], [0], [[1, 1]], False, [12]
    )
    got = model(d[0], x, np.float32([3.0]), np.float32([2.0]), 1.0, 0.0, 0.0, 0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(3))
def test_keep_and_counts_per_sample(seed):
    from dlpipe.operators._normalize_gpu import _keep_and_counts

    rng = np.random.default_rng(seed)
    shapes = rng.integers(0, 9, (6, 4))
    for axes in [(), (0,), (1, 3), (0, 1, 2, 3)]:
        keep, counts = _keep_and_counts(shapes, axes)
        for sh, k, c in zip(shapes, keep, counts, strict=True):
            assert tuple(k) == tuple(1 if d in axes else int(e) for d, e in enumerate(sh))
            assert c == int(np.prod([sh[a] for a in axes]))


def test_reduce_descriptors_of_the_same_ragged_batch_twice():
    """normalize reduces a batch twice (mean, squared deviations): the second call reuses
    the first's rows (``reduce._ragged_rows``) with its own norms and addresses; another batch
    gets its own rows."""
    from dlpipe.kernels import reduce as kreduce

    rng = np.random.default_rng(3)
    shapes = np.stack([np.full(6, 64), rng.integers(5, 90, 6)], 1).astype(np.int64)
    strides = np.stack([shapes[:, 1], np.ones(6, np.int64)], 1)
    others = shapes.copy()
    others[0, 1] += 1
    for batch, norms in ((shapes, 1.0 / shapes[:, 1]), (shapes, np.ones(6)), (others, np.ones(6))):
        ptrs = [rng.integers(1, 2**40, 6).astype(np.uint64) for _ in range(3)]
        got = kreduce.reduce_descriptors(*ptrs[:2], batch, strides, (1,), norms, ptrs[2])
        want = kreduce._descriptors(6, 2, batch, strides, (1,), norms)
        for name, p in zip(("in_ptr", "out_ptr", "mean_ptr"), ptrs, strict=True):
            want[name] = p.view(np.int64)
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("keep", [[[64, 1]] * 4, [[64, 1], [64, 1], [1, 1], [64, 1]]])
def test_descriptor_strides_of_one_or_several_statistic_shapes(keep):
    """The statistics' strides in the descriptors (one memoised row for a batch of one
    statistic shape, repeated by the assignment) are each row's ``broadcast_strides``."""
    keep = np.array(keep, np.int64)
    shapes = np.array([[64, 90 + i] for i in range(4)], np.int64)
    strides = np.array([[s[1], 1] for s in shapes], np.int64)
    ptrs = np.arange(4, dtype=np.uint64)
    d = normalize_descriptors(
        ptrs, ptrs, shapes, strides, ptrs, keep, ptrs, keep, True, shapes[:, 1]
    )
    want = [broadcast_strides(k[None])[0].tolist() for k in keep]
    assert d["mean_strides"][:, :2].tolist() == want == d["dev_strides"][:, :2].tolist()
    assert (d["mean_strides"][:, 2:] == 0).all() and (d["dev_strides"][:, 2:] == 0).all()
