"""The GPU warps' host side built over whole batches (no GPU needed): the batched matrix
builders, the operators' batch parameters and the descriptor table equal, bit for bit, what
the per-sample code gives (the GPU tests compare the GPU with the CPU exactly)."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.kernels.warp import WARP_DESC, warp_descriptors
from dlpipe.operators._warp import WarpOp
from dlpipe.operators.rotate import Rotate, rotate_matrices_2d, rotate_matrix, rotated_canvas
from dlpipe.operators.warp_affine import WarpAffine, invert_affine, invert_affines


def _per_sample(op, args, shapes):
    """WarpOp's sample-by-sample batch parameters (what the batched paths replace)."""
    return WarpOp._batch_params(op, (None,), args, shapes, None)


def test_invert_affines_equals_invert_affine():
    rng = np.random.default_rng(0)
    for nd in (2, 3):
        m = rng.uniform(-2, 2, (200, nd, nd + 1)).astype(np.float32)
        m[:, :, :nd] += 3 * np.eye(nd, dtype=np.float32)  # invertible
        got = invert_affines(m)
        want = np.stack([invert_affine(x) for x in m])
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    with pytest.raises(np.linalg.LinAlgError):
        invert_affines(np.zeros((2, 2, 3), np.float32))


def test_rotate_matrices_2d_equal_rotate_matrix():
    rng = np.random.default_rng(1)
    n = 300
    angles = np.concatenate([rng.uniform(-360, 360, n - 6), [0, 90, -90, 180, 45, 30]]).astype(
        np.float32
    )
    in_hw = rng.integers(1, 600, (n, 2))
    out_hw = rng.integers(1, 600, (n, 2))
    got = rotate_matrices_2d(in_hw, out_hw, angles)
    want = np.stack(
        [
            rotate_matrix(tuple(i.tolist()), tuple(o.tolist()), float(a)).reshape(6)
            for i, o, a in zip(in_hw, out_hw, angles, strict=True)
        ]
    )
    assert got.dtype == np.float32 and got.shape == (n, 6)
    np.testing.assert_array_equal(got, want)


def _rotate_op(layout="HWC", **kw):
    op = Rotate(**kw)
    op.output_layouts([layout])
    return op


@pytest.mark.parametrize(
    "kw", [dict(keep_size=True), dict(), dict(size=[17, 29]), dict(keep_size=True, angle=12.5)]
)
@pytest.mark.parametrize("layout", ["HWC", "FHWC"])
def test_rotate_batch_params_equal_per_sample(kw, layout):
    rng = np.random.default_rng(2)
    n = 40
    hw = rng.integers(5, 300, (n, 2))
    shapes = hw if layout == "HWC" else np.c_[rng.integers(1, 4, n), hw]
    shapes = np.c_[shapes, np.full(n, 3)].astype(np.int64)
    op = _rotate_op(layout, **kw)
    args = {}
    if "angle" not in kw:
        args["angle"] = [np.float32(a) for a in rng.uniform(-180, 180, n)]
    mats, sizes = op._batch_params((None,), args, shapes, None)
    want_mats, want_sizes = _per_sample(op, args, shapes)
    np.testing.assert_array_equal(mats, want_mats)
    np.testing.assert_array_equal(np.asarray(sizes), np.asarray(want_sizes))
    for (h, w), a, s in zip(hw, args.get("angle", [12.5] * n), sizes, strict=True):
        if not kw or kw == dict():  # the canvas grows to the rotated input
            assert tuple(s) == rotated_canvas((int(h), int(w)), float(a))


def _warp_op(**kw):
    op = WarpAffine(**kw)
    op.output_layouts(["HWC"])
    return op


@pytest.mark.parametrize("inverse_map", [True, False])
def test_warp_affine_batch_params_equal_per_sample(inverse_map):
    rng = np.random.default_rng(3)
    n = 50
    shapes = np.c_[rng.integers(5, 300, (n, 2)), np.full(n, 3)].astype(np.int64)
    m = rng.uniform(-1, 1, (n, 2, 3)).astype(np.float32) + np.eye(2, 3, dtype=np.float32)
    for args, kw in [
        ({"matrix": list(m)}, {}),
        ({"matrix": [x.reshape(6) for x in m]}, dict(size=[31, 12])),
        ({"matrix": [x.astype(np.float64) for x in m]}, {}),
        ({}, dict(matrix=[1.0, 0.2, -3, 0.1, 0.9, 4])),
    ]:
        op = _warp_op(inverse_map=inverse_map, **kw)
        mats, sizes = op._batch_params((None,), args, shapes, None)
        want_mats, want_sizes = _per_sample(op, args, shapes)
        np.testing.assert_array_equal(mats, want_mats)
        np.testing.assert_array_equal(np.asarray(sizes), np.asarray(want_sizes))


@pytest.mark.parametrize("layout", ["HWC", "FHWC"])
def test_fused_warp_batch_params_equal_each_kinds_operator(layout):
    """``_warp_fused`` (the automatic augmentations' warps and rotation in one operator): each
    sample's matrix and size are those of ``warp_affine(inverse_map=False)`` or
    ``rotate(keep_size=True)`` over the same samples, in the batched and per-sample paths."""
    from dlpipe.operators.warp_fused import WarpFused

    rng = np.random.default_rng(6)
    n = 40
    hw = rng.integers(5, 300, (n, 2))
    shapes = hw if layout == "HWC" else np.c_[rng.integers(1, 4, n), hw]
    shapes = np.c_[shapes, np.full(n, 3)].astype(np.int64)
    kinds = rng.integers(0, 2, n).astype(np.int32)
    m = rng.uniform(-1, 1, (n, 2, 3)).astype(np.float32) + np.eye(2, 3, dtype=np.float32)
    angles = rng.uniform(-135, 135, n).astype(np.float32)
    args = {"matrix": list(m), "angle": list(angles), "kind": list(kinds)}
    op = WarpFused(fill_value=128)
    op.output_layouts([layout])
    mats, sizes = op._batch_params((None,), args, shapes, None)
    per_mats, per_sizes = _per_sample(op, args, shapes)
    np.testing.assert_array_equal(mats, per_mats)
    np.testing.assert_array_equal(np.asarray(sizes), np.asarray(per_sizes))
    affine = WarpAffine(inverse_map=False, fill_value=128)
    rotate = Rotate(keep_size=True, fill_value=128)
    for each in (affine, rotate):
        each.output_layouts([layout])
    for k, each, name, values in ((0, affine, "matrix", m), (1, rotate, "angle", angles)):
        sel = np.flatnonzero(kinds == k)
        want_mats, want_sizes = each._batch_params(
            (None,), {name: list(values[sel])}, shapes[sel], None
        )
        np.testing.assert_array_equal(mats[sel], want_mats)
        np.testing.assert_array_equal(sizes[sel], np.asarray(want_sizes))
    assert 0 < len(np.flatnonzero(kinds)) < n


def test_warp_affine_batch_params_leave_bad_samples_to_the_per_sample_path():
    from dlpipe import ArgumentError

    shapes = np.array([[10, 12, 3], [11, 9, 3]], np.int64)
    op = _warp_op(inverse_map=False)
    singular = [np.eye(2, 3, dtype=np.float32), np.zeros((2, 3), np.float32)]
    with pytest.raises(ArgumentError, match="cannot be inverted"):
        op._batch_params((None,), {"matrix": singular}, shapes, None)
    wrong = [np.eye(2, 3, dtype=np.float32), np.eye(3, 4, dtype=np.float32)]
    with pytest.raises(ArgumentError, match="must be a"):
        op._batch_params((None,), {"matrix": wrong}, shapes, None)


def _reference_descriptors(
    in_ptrs, in_shapes, in_strides, out_ptrs, out_shapes, frames, channels, nd, isz, osz, mats,
    border,
):  # fmt: skip
    """The per-sample, per-frame loop that ``warp_descriptors`` replaced."""

    def c_strides(shape):
        st, acc = [], 1
        for v in reversed(shape):
            st.append(acc)
            acc *= int(v)
        return st[::-1]

    rows = []
    first = 1 if frames else 0
    sp = slice(first, first + nd)
    for i, (shape, strides, oshape) in enumerate(
        zip(in_shapes, in_strides, out_shapes, strict=True)
    ):
        ost = c_strides(oshape)
        for f in range(int(shape[0]) if frames else 1):
            rows.append(
                (
                    int(in_ptrs[i]) + f * (int(strides[0]) if frames else 0) * isz,
                    int(out_ptrs[i]) + f * (ost[0] if frames else 0) * osz,
                    [int(v) for v in shape[sp]][::-1] + [1] * (3 - nd),
                    [int(v) for v in strides[sp]][::-1] + [0] * (3 - nd),
                    [int(v) for v in oshape[sp]][::-1] + [1] * (3 - nd),
                    [int(v) for v in ost[sp]][::-1] + [0] * (3 - nd),
                    int(shape[-1]) if channels else 1,
                    i,
                )
            )
    d = np.zeros(len(rows), WARP_DESC)
    for k, r in enumerate(rows):
        d["in_ptr"][k], d["out_ptr"][k] = r[0], r[1]
        d["in_size"][k], d["in_stride"][k], d["out_size"][k], d["out_stride"][k] = r[2:6]
        d["channels"][k], d["mat_index"][k] = r[6], r[7]
    if mats is not None and len(rows):
        nm = nd * (nd + 1)
        d["m"][:, :nm] = np.asarray(mats, np.float32).reshape(-1, nm)[d["mat_index"]]
    if border is not None:
        d["border_out"], d["border_in"] = float(border[0]), float(border[1])
    return d


@pytest.mark.parametrize("layout", ["HWC", "FHWC", "DHWC", "FDHWC", "HW", "FHW"])
@pytest.mark.parametrize("with_mats", [True, False])
def test_warp_descriptors_equal_the_per_sample_loop(layout, with_mats):
    rng = np.random.default_rng(4)
    n = 9
    frames, channels = layout[0] == "F", layout[-1] == "C"
    nd = 3 if "D" in layout else 2
    shapes = rng.integers(1, 40, (n, len(layout)))
    if frames:
        shapes[:, 0] = rng.integers(0, 4, n)  # a sequence of no frames has no descriptor
    strides = np.stack([np.asarray(c, np.int64) for c in map(_padded_strides, shapes)])
    out_shapes = shapes.copy()
    first = 1 if frames else 0
    out_shapes[:, first : first + nd] = rng.integers(1, 40, (n, nd))
    in_ptrs = (rng.integers(1, 1 << 40, n) * 256).astype(np.uint64)
    out_ptrs = (rng.integers(1, 1 << 40, n) * 256).astype(np.uint64)
    mats = rng.uniform(-5, 5, (n, nd * (nd + 1))).astype(np.float32) if with_mats else None
    for border in (None, (7.0, 3.0)):
        a = (in_ptrs, shapes, strides, out_ptrs, out_shapes, frames, channels, nd, 2, 4, mats,
             border)  # fmt: skip
        got = warp_descriptors(*a)
        want = _reference_descriptors(*a)
        assert got.dtype == WARP_DESC
        assert got.tobytes() == want.tobytes()


def _padded_strides(shape):
    """Strides (elements) of a sample inside a larger buffer: each row padded by 3."""
    st, acc = [], 1
    for i, v in enumerate(reversed(shape.tolist())):
        st.append(acc)
        acc *= int(v) + (3 if i == 1 else 0)
    return st[::-1]


@pytest.mark.parametrize("layout", ["HWC", "HW", "DHWC"])
@pytest.mark.parametrize("border", [None, (128, 128), (-0.0, 0.0)])
def test_uniform_warp_descriptors_equal_warp_descriptors(layout, border):
    from dlpipe.kernels.warp import uniform_warp_descriptors, warp_layout

    rng = np.random.default_rng(5)
    n = 7
    nd = 3 if "D" in layout else 2
    in_shape = tuple(int(v) for v in rng.integers(2, 50, len(layout)))
    in_strides = tuple(_padded_strides(np.array(in_shape)))
    size = tuple(int(v) for v in rng.integers(2, 50, nd))
    channels = layout.endswith("C")
    in_ptrs = (rng.integers(1, 1 << 40, n) * 256).astype(np.uint64)
    out_ptrs = (rng.integers(1, 1 << 40, n) * 256).astype(np.uint64)
    mats = rng.uniform(-5, 5, (n, nd * (nd + 1))).astype(np.float32)
    bb = None if border is None else np.array(border, np.float64).tobytes()
    out_shape, row = warp_layout(in_shape, in_strides, size, channels, nd, 1, 4, bb)
    assert out_shape == ((*size, in_shape[-1]) if channels else size)
    got = uniform_warp_descriptors(row, in_ptrs, out_ptrs, mats, nd)
    want = warp_descriptors(in_ptrs, [in_shape] * n, [in_strides] * n, out_ptrs, [out_shape] * n,
                            False, channels, nd, 1, 4, mats, border)  # fmt: skip
    assert got.tobytes() == want.tobytes()
