"""The host side of GPU gaussian_blur against per-sample references: the windows of a batch
(``_blur_plan``: vectorised taps, distinct sets once) equal each sample's ``blur_windows``
bit for bit, and the vectorised pass descriptors (``kernels.gaussian_blur``) equal those the
per-sample construction below (the launcher's previous code) gives, window offsets aside
(the taps they point at are compared instead)."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError
from dlpipe.kernels.gaussian_blur import BLUR_DESC, blur_elements, blur_pass_descriptors
from dlpipe.operators._blur_plan import WindowPlan, batch_plan, gaussian_windows, window_sets
from dlpipe.operators.gaussian_blur import GaussianBlur, blur_windows, gaussian_window


def _op(layout="HWC", **kw):
    op = GaussianBlur(**kw)
    op.output_layouts([layout])
    return op


def _taps(plan, set_index, axes):
    """Set ``set_index``'s windows in ``plan``, outermost data axis first."""
    return [plan.flat[o : o + s] for o, s in plan.offs[set_index, 3 - axes :].tolist()]


@pytest.mark.parametrize("size", [1, 3, 5, 7, 13, 31])
def test_gaussian_windows_equal_the_scalar_ones(size):
    rng = np.random.default_rng(size)
    sigmas = np.concatenate([rng.uniform(0.05, 8, 200), rng.uniform(0, 1, 50).astype(np.float32)])
    got = gaussian_windows(sigmas, size)
    for s, w in zip(sigmas, got, strict=True):
        np.testing.assert_array_equal(w, gaussian_window(float(s), size))


@pytest.mark.parametrize("axes", [1, 2, 3])
def test_window_sets_equal_blur_windows(axes):
    rng = np.random.default_rng(axes)
    m = 40
    sigmas = rng.uniform(0, 3, (m, axes)).round(1)
    sizes = rng.choice([0, 3, 5, 7, 9], (m, axes)).astype(np.float64)
    sizes[(sigmas == 0) & (sizes == 0)] = 5
    sigmas[:5] = sigmas[:5, :1]  # one value for every axis
    plan, bad = window_sets(sigmas, sizes, axes)
    assert bad == -1
    for k in range(m):
        want = blur_windows("t", sigmas[k], sizes[k], axes)
        for w, g in zip(want, _taps(plan, k, axes), strict=True):
            np.testing.assert_array_equal(g, w)
    one, _ = window_sets(sigmas[:, :1], sizes[:, :1], axes)  # (m, 1): repeated per axis
    for k in range(m):
        want = blur_windows("t", sigmas[k, :1], sizes[k, :1], axes)
        for w, g in zip(want, _taps(one, k, axes), strict=True):
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    "sigma, size",
    [([[1.0], [-1.0]], [[0.0], [0.0]]), ([[1.0], [0.0]], [[3.0], [0.0]]),
     ([[1.0], [1.0]], [[3.0], [4.0]]), ([[1.0], [np.nan]], [[0.0], [0.0]])],
)  # fmt: skip
def test_window_sets_name_the_first_refused_row(sigma, size):
    plan, bad = window_sets(np.array(sigma), np.array(size), 2)
    assert plan is None and bad == 1


@pytest.mark.parametrize("given", ["sigma", "window_size", "both"])
def test_batch_plan_equals_each_samples_windows(given):
    rng = np.random.default_rng(3)
    n = 12
    args = {}
    if given in ("sigma", "both"):
        args["sigma"] = [np.float32(v) for v in rng.choice([0.5, 1.0, 1.7, 2.0], n)]
    if given in ("window_size", "both"):
        args["window_size"] = [np.array([v, 5], np.int32) for v in rng.choice([3, 7, 9], n)]
    op = _op(sigma=1.0) if given != "window_size" else _op(window_size=5)  # sigma derived
    plan, sets = batch_plan(op, args, n, 2)
    distinct = {tuple(tuple(np.ravel(v[i]).tolist()) for v in args.values()) for i in range(n)}
    assert len(plan.offs) == len(distinct)
    for i in range(n):
        want = op.sample_windows({k: v[i] for k, v in args.items()}, 2)
        for w, g in zip(want, _taps(plan, sets[i], 2), strict=True):
            np.testing.assert_array_equal(g, w)
    # no argument inputs: one set, the operator's, made once
    plan2, sets2 = batch_plan(op, {}, n, 2)
    assert batch_plan(op, {}, n, 2)[0] is plan2 and (sets2 == 0).all()


def test_batch_plan_raises_the_first_bad_samples_error():
    op = _op(sigma=1.0)
    args = {"sigma": [np.float32(1), np.float32(-2), np.float32(-3)]}
    with pytest.raises(ArgumentError, match=r"sigma=-2.0 must be non-negative"):
        batch_plan(op, args, 3, 2)
    args = {"window_size": [np.int32(3), np.int32(4)]}
    with pytest.raises(ArgumentError, match="window_size=4 must be odd"):
        batch_plan(op, args, 2, 2)
    # per-sample values of different sizes: each sample alone
    args = {"sigma": [np.float32(1), np.array([1, 2], np.float32)]}
    plan, sets = batch_plan(op, args, 2, 2)
    for i in range(2):
        want = op.sample_windows({"sigma": args["sigma"][i]}, 2)
        for w, g in zip(want, _taps(plan, sets[i], 2), strict=True):
            np.testing.assert_array_equal(g, w)


# --- the descriptors: the per-sample construction they replace -------------------------------


def _ref_elements(shapes, strides, start, axes, channels):
    elems, geo = [], []
    for i, (shape, st) in enumerate(zip(shapes, strides, strict=True)):
        shape = [int(v) for v in shape]
        st = [int(v) for v in st]
        lead = shape[:start]
        size = [1] * (3 - axes) + shape[start : start + axes]
        stride = [0] * (3 - axes) + st[start : start + axes]
        geo.append((size, stride, shape[-1] if channels else 1))
        for j, idx in enumerate(np.ndindex(*lead) if lead else [()]):
            elems.append((i, sum(k * s for k, s in zip(idx, st[:start], strict=True)), j))
    return elems, geo


def _ref_descriptors(shapes, strides, start, axes, channels, ptrs, isz, windows):
    """The previous launcher's descriptors; ``windows[i]`` each sample's windows. Window
    offsets index the per-sample concatenation of ``windows`` (returned with them)."""
    elems, geo = _ref_elements(shapes, strides, start, axes, channels)
    in_ptrs_s, out_ptrs_s, tmp = ptrs
    flat, win_offs, pos = [], [], 0
    for ws in windows:
        offs = [(0, 1)] * (3 - axes)
        for w in ws:
            offs.append((pos, w.size))
            flat.append(w)
            pos += w.size
        win_offs.append(offs)
    vol = [int(np.prod(geo[i][0])) * geo[i][2] for i, _, _ in elems]
    elem_start = np.concatenate([[0], np.cumsum(vol)[:-1]]).astype(np.int64)
    in_ptrs = [int(in_ptrs_s[i]) + off * isz[0] for i, off, _ in elems]
    out_ptrs = [int(out_ptrs_s[i]) + j * vol[k] * isz[1] for k, (i, _, j) in enumerate(elems)]
    tmp_ptrs = [[t + int(o) * isz[2] for o in elem_start] for t in tmp]

    def contiguous(i):
        size, _, c = geo[i]
        return [size[1] * size[2] * c, size[2] * c, c]

    descs = []
    src = (in_ptrs, lambda i: geo[i][1])
    for p, a in enumerate(reversed(range(axes))):
        axis = 3 - axes + a
        dst = out_ptrs if p == axes - 1 else tmp_ptrs[p % 2]
        d = np.zeros(len(elems), BLUR_DESC)
        for k, (i, _, _) in enumerate(elems):
            size, _, c = geo[i]
            d["in_ptr"][k], d["out_ptr"][k] = src[0][k], dst[k]
            d["size"][k] = size
            d["in_stride"][k] = src[1](i)
            d["out_stride"][k] = [size[1] * size[2] * c, size[2] * c, c]
            d["channels"][k] = c
            d["win_off"][k], d["win_size"][k] = win_offs[i][axis]
        descs.append(d)
        src = (dst, contiguous)
    return np.concatenate(descs), np.concatenate(flat)


@pytest.mark.parametrize("layout", ["HWC", "HW", "CHW", "FHWC", "DHWC", "CDHW", "W", "FWC", "CFHW"])
@pytest.mark.parametrize("seed", range(3))
def test_descriptors_equal_the_per_sample_construction(layout, seed):
    from dlpipe.operators.gaussian_blur import blur_dims

    rng = np.random.default_rng(seed)
    n, nd = 6, len(layout)
    start, axes, channels = blur_dims("t", layout, nd)
    shapes = rng.integers(1, 7, (n, nd))
    shapes[rng.integers(0, n), 0] = 0 if seed == 1 else shapes[0, 0]  # an empty sample
    strides = np.ones_like(shapes)
    strides[:, :-1] = np.cumprod(shapes[:, :0:-1], axis=1)[:, ::-1]
    if seed == 2:  # pitched rows: strides larger than the extents
        strides[:, :-1] *= 2
    sigma = [np.float32(v) for v in rng.choice([0.5, 1.0, 2.0], n)]
    op = _op(layout)
    plan, sets = batch_plan(op, {"sigma": sigma}, n, axes)
    windows = [op.sample_windows({"sigma": s}, axes) for s in sigma]
    in_ptrs = (rng.integers(1, 1000, n) * 256 + (1 << 32)).astype(np.uint64)
    out_ptrs = (rng.integers(1, 1000, n) * 256 + (1 << 40)).astype(np.uint64)
    tmp = [1 << 44, 1 << 45][: min(axes - 1, 2)]
    isz = (1, 4, 4)
    el = blur_elements(shapes, strides, start, axes, channels)
    got = blur_pass_descriptors(el, in_ptrs, 1, out_ptrs, 4, tmp, 4, axes, plan.offs[sets])
    want, want_flat = _ref_descriptors(
        shapes, strides, start, axes, channels, (in_ptrs, out_ptrs, tmp), isz, windows
    )
    assert got.dtype == want.dtype and len(got) == len(want)
    for f in BLUR_DESC.names:
        if f != "win_off":
            np.testing.assert_array_equal(got[f], want[f], err_msg=f)
    for g, w in zip(got, want, strict=True):
        size = int(w["win_size"])
        np.testing.assert_array_equal(
            plan.flat[g["win_off"] : g["win_off"] + size],
            want_flat[w["win_off"] : w["win_off"] + size],
        )


def test_plan_of_sets():
    a, b = gaussian_window(1.0, 5), gaussian_window(2.0, 7)
    plan = WindowPlan.of_sets([[a, b], [b, a]], 2)
    assert plan.offs.tolist() == [
        [[0, 1], [0, 5], [5, 7]],
        [[0, 1], [12, 7], [19, 5]],
    ]
    np.testing.assert_array_equal(plan.flat, np.concatenate([a, b, b, a]))
