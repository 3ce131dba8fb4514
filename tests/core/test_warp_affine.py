"""fn.warp_affine against a float64 reference that maps each output pixel centre through the
matrix and samples bilinearly / nearest (written here), and against OpenCV's warpAffine with
the pixel-centre shift; 2-D and 3-D, borders, dtypes, inverse_map, the matrix as argument,
argument input and second input, sequences, and errors."""

from __future__ import annotations

import itertools

import cv2
import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, types
from dlpipe.operators.warp_affine import WarpAffine


def run(x, layout="HWC", inputs=(), args=None, **kwargs):
    op = WarpAffine(**kwargs)
    assert op.output_layouts([layout]) == [layout]
    return op.run_sample((x, *inputs), args or {}, None)


def ref_warp(img, m, out_spatial, interp="linear", fill=None):
    """float64 reference: out[p] = sample(img, M @ (p + 0.5)); img is (*spatial, C)."""
    img = np.asarray(img, np.float64)
    spatial = img.shape[:-1]
    nd = len(spatial)
    m = np.asarray(m, np.float64).reshape(nd, nd + 1)
    out = np.zeros((*out_spatial, img.shape[-1]))

    def at(idx):  # idx: (x, y[, z]) integers
        inside = all(0 <= i < s for i, s in zip(idx, spatial[::-1], strict=True))
        if not inside:
            if fill is not None:
                return np.full(img.shape[-1], fill, np.float64)
            idx = [min(max(i, 0), s - 1) for i, s in zip(idx, spatial[::-1], strict=True)]
        return img[tuple(idx[::-1])]

    for pos in itertools.product(*(range(s) for s in out_spatial)):
        p = np.array(pos[::-1], np.float64) + 0.5  # x, y[, z]
        src = m[:, :nd] @ p + m[:, nd]
        if interp == "nn":
            out[pos] = at([int(np.floor(v)) for v in src])
            continue
        v = src - 0.5
        i0 = np.floor(v).astype(int)
        q = v - i0
        acc = 0.0
        for corner in itertools.product((0, 1), repeat=nd):
            w = np.prod([q[a] if c else 1 - q[a] for a, c in enumerate(corner)])
            acc = acc + w * at([i0[a] + c for a, c in enumerate(corner)])
        out[pos] = acc
    return out


def to_type(x, dtype):
    if np.dtype(dtype).kind == "f":
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), info.min, info.max).astype(dtype)


def close(out, ref, dtype):
    """Integer outputs: the reference rounded, up to float32-vs-float64 error near a tie
    (``|out - ref| <= 0.5 + 2e-3`` after saturation); float outputs: within 1e-3."""
    assert out.dtype == dtype and out.shape == ref.shape
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-3)
        return
    info = np.iinfo(dtype)
    d = np.abs(out.astype(np.float64) - np.clip(ref, info.min, info.max))
    assert d.max(initial=0) <= 0.5 + 2e-3, d.max()


def image(shape=(13, 17, 3), dtype=np.uint8, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-20, 300, shape).astype(dtype)
    return rng.integers(0, 200 if dtype == np.int8 else 256, shape).astype(dtype)


MATRICES = [
    [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
    [0.913, 0.197, -3.07, -0.103, 1.117, 2.53],
    [0.5, 0.0, 1.0, 0.0, 0.5, 1.0],  # enlarge x2
    [-1.0, 0.0, 17.0, 0.0, 1.0, 0.0],  # mirror
    [1.7, -0.6, 4.0, 0.4, 1.3, -8.0],
]


@pytest.mark.parametrize("m", MATRICES)
@pytest.mark.parametrize("interp", ["linear", "nn"])
@pytest.mark.parametrize("fill", [None, 50.0])
def test_matches_reference_2d(m, interp, fill):
    x = image()
    kw = dict(matrix=m, interp_type=types.INTERP_NN if interp == "nn" else types.INTERP_LINEAR)
    if fill is not None:
        kw["fill_value"] = fill
    out = run(x, **kw)
    close(out, ref_warp(x, m, (13, 17), interp, fill), np.uint8)


@pytest.mark.parametrize(
    "in_dtype, out_dtype",
    [
        (np.uint8, np.float32),
        (np.float32, np.uint8),
        (np.int16, np.int16),
        (np.int16, np.float32),
        (np.int32, np.int32),
        (np.float32, np.int32),
        (np.float32, np.float32),
    ],
)
def test_type_pairs(in_dtype, out_dtype):
    x = image(dtype=in_dtype, seed=3)
    if np.dtype(in_dtype).kind == "i":
        x = (x.astype(np.int64) - 100).astype(in_dtype)
    m = MATRICES[1]
    out = run(x, matrix=m, dtype=out_dtype, fill_value=-7.0)
    # linear interpolation reads the border as the input type: -7 -> output type -> input type
    fill = float(to_type(to_type(np.array(-7.0), out_dtype), in_dtype))
    ref = ref_warp(x, m, (13, 17), fill=fill)
    close(out, ref, out_dtype)


def test_output_size_and_grayscale():
    x = image((11, 9, 1))
    m = [0.5, 0, 0, 0, 0.5, 0]
    out = run(x, matrix=m, size=[22, 18.4])  # rounded to nearest
    assert out.shape == (22, 18, 1)
    close(out, ref_warp(x, m, (22, 18)), np.uint8)
    hw = run(x[..., 0], layout="HW", matrix=m, size=(22, 18))
    assert hw.shape == (22, 18)
    np.testing.assert_array_equal(hw, out[..., 0])


def test_matches_opencv_with_the_pixel_centre_shift():
    """OpenCV samples at integer pixel centres: M' = [A | A @ (0.5, 0.5) + t - 0.5]."""
    x = image((40, 52, 3), seed=5)
    m = np.array(MATRICES[4], np.float64).reshape(2, 3)
    m_cv = m.copy()
    m_cv[:, 2] = m[:, :2] @ [0.5, 0.5] + m[:, 2] - 0.5
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    want = cv2.warpAffine(x, m_cv, (52, 40), flags=flags, borderMode=cv2.BORDER_REPLICATE)
    out = run(x, matrix=m.ravel().tolist())
    assert np.abs(out.astype(int) - want).max() <= 1  # OpenCV: 5-bit fixed-point weights
    want = cv2.warpAffine(
        x, m_cv, (52, 40), flags=flags, borderMode=cv2.BORDER_CONSTANT, borderValue=(9, 9, 9)
    )
    assert np.abs(run(x, matrix=m.ravel().tolist(), fill_value=9).astype(int) - want).max() <= 1


def test_inverse_map_false_inverts():
    x = image()
    fwd = np.array([[1.2, 0.3, 2.0], [-0.2, 0.8, -1.0]])
    inv = np.linalg.inv(np.vstack([fwd, [0, 0, 1]]))[:2]
    a = run(x, matrix=fwd.ravel().tolist(), inverse_map=False)
    close(a, ref_warp(x, inv, (13, 17)), np.uint8)


def test_3d_trilinear_and_nearest():
    x = image((5, 6, 7, 2), seed=2)
    m = [0.913, 0.137, 0.011, 0.517, -0.093, 1.071, 0.213, -0.291, 0.047, 0.013, 0.787, 0.731]
    out = run(x, layout="DHWC", matrix=m, size=(6, 5, 8))
    assert out.shape == (6, 5, 8, 2)
    close(out, ref_warp(x, m, (6, 5, 8)), np.uint8)
    nn = run(x, layout="DHWC", matrix=m, interp_type=types.INTERP_NN, fill_value=3)
    close(nn, ref_warp(x, m, (5, 6, 7), "nn", 3.0), np.uint8)


def test_sequences_warp_every_frame():
    x = image((3, 10, 12, 3), seed=4)
    m = MATRICES[1]
    out = run(x, layout="FHWC", matrix=m)
    assert out.shape == x.shape
    for f in range(3):
        np.testing.assert_array_equal(out[f], run(x[f], matrix=m))


def test_matrix_sources_agree():
    x = image()
    m = np.array(MATRICES[4], np.float32)
    a = run(x, matrix=m.tolist())
    b = run(x, args={"matrix": m.reshape(2, 3)})
    c = run(x, inputs=(m.reshape(2, 3),))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_pipeline_with_transforms_and_second_input():
    imgs = [image(seed=i) for i in range(3)]
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None, seed=2)
    with pipe:
        x = fn.external_source(lambda: imgs, layout="HWC")
        mt = fn.transforms.rotation(angle=fn.random.uniform(range=(-20, 20)), center=[8.5, 6.5])
        a = fn.warp_affine(x, matrix=mt, fill_value=0, inverse_map=False)
        b = fn.warp_affine(x, mt, fill_value=0, inverse_map=False)
        c = ops.WarpAffine(matrix=[1, 0, 0, 0, 1, 0], size=(5, 6))(x)
        pipe.set_outputs(a, b, c, mt)
    a, b, c, mt = pipe.run()
    assert a.layout() == "HWC"
    for i in range(3):
        inv = np.linalg.inv(np.vstack([mt.at(i).astype(np.float64), [0, 0, 1]]))[:2]
        close(a.at(i), ref_warp(imgs[i], inv, (13, 17), fill=0.0), np.uint8)
        np.testing.assert_array_equal(a.at(i), b.at(i))
        np.testing.assert_array_equal(c.at(i), imgs[i][:5, :6])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(matrix=[1, 2, 3]), "6 \\(2-D\\) or 12"),
        (dict(matrix=[1, 0, 0, 0, 1, 0], interp_type=types.INTERP_CUBIC), "INTERP_CUBIC"),
        (dict(matrix=[1, 0, 0, 0, 1, 0], size=[0, 5]), "positive"),
        (dict(matrix=[1, 0, 0, 0, 1, 0], fill_value=[1, 2]), "fill_value"),
        (dict(matrix=[1, 0, 0, 0, 1, 0], dtype=1, output_dtype=1), "not both"),
    ],
)
def test_argument_errors(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        WarpAffine(**kwargs)


def test_run_time_errors():
    x = image()
    with pytest.raises(ArgumentError, match="must be provided"):
        pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
        with pipe:
            fn.warp_affine(fn.external_source(lambda: [x]))
    with pytest.raises(ArgumentError, match="\\(2, 3\\) tensor"):
        run(x, matrix=[1] * 12)
    with pytest.raises(ArgumentError, match="unsupported input/output types"):
        run(x, matrix=[1, 0, 0, 0, 1, 0], dtype=types.INT16)
    with pytest.raises(ArgumentError, match="layout 'CHW'"):
        run(np.zeros((3, 4, 5), np.uint8), layout="CHW", matrix=[1, 0, 0, 0, 1, 0])
    with pytest.raises(ArgumentError, match="must give 2 extents"):
        run(x, matrix=[1, 0, 0, 0, 1, 0], size=[1, 2, 3])


def test_nearest_border_is_the_output_type_fill():
    """Nearest neighbour writes fill_value as the output type (-7.5 stays in float32), linear
    interpolation reads it as an input pixel (uint8: 0)."""
    x = image()
    m = [1, 0, -100, 0, 1, 0]  # everything outside
    nn = run(x, matrix=m, dtype=types.FLOAT, fill_value=-7.5, interp_type=types.INTERP_NN)
    assert (nn == -7.5).all()
    lin = run(x, matrix=m, dtype=types.FLOAT, fill_value=-7.5)
    assert (lin == 0).all()


def test_gpu_descriptors_on_the_host():
    """One descriptor per frame: pointers offset by the frame stride, sizes and strides in
    (x, y, z) order, the sample's matrix and border values."""
    from dlpipe.kernels.warp import WARP_DESC, warp_descriptors

    mats = np.arange(12, dtype=np.float32).reshape(2, 6)
    d = warp_descriptors(
        in_ptrs=[1000, 5000],
        in_shapes=[(2, 4, 5, 3), (1, 6, 7, 3)],
        in_strides=[(60, 15, 3, 1), (126, 21, 3, 1)],
        out_ptrs=[9000, 20000],
        out_shapes=[(2, 8, 9, 3), (1, 2, 3, 3)],
        frames=True,
        channels=True,
        spatial_ndim=2,
        in_itemsize=4,
        out_itemsize=1,
        mats=mats,
        border=(7.0, 7.0),
    )
    assert d.dtype == WARP_DESC and WARP_DESC.itemsize == 192 and len(d) == 3
    assert d["in_ptr"].tolist() == [1000, 1000 + 60 * 4, 5000]
    assert d["out_ptr"].tolist() == [9000, 9000 + 8 * 9 * 3, 20000]
    assert d["in_size"][0].tolist() == [5, 4, 1] and d["in_stride"][0].tolist() == [3, 15, 0]
    assert d["out_size"][2].tolist() == [3, 2, 1] and d["out_stride"][2].tolist() == [3, 9, 0]
    assert d["mat_index"].tolist() == [0, 0, 1] and d["channels"].tolist() == [3, 3, 3]
    np.testing.assert_array_equal(d["m"][2, :6], mats[1])
    assert (d["border_out"] == 7).all()
    v = warp_descriptors(
        [0], [(4, 5, 6, 1)], [(30, 6, 1, 1)], [0], [(4, 5, 6, 1)], False, True, 3, 1, 1, None, None
    )
    assert v["in_size"][0].tolist() == [6, 5, 4] and v["in_stride"][0].tolist() == [1, 6, 30]
