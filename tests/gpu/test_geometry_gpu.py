"""GPU geometry and filter operators against the same operators on the CPU (random inputs):
values, dtype and shape, inside pipelines that feed both from one external source."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402


def _both(batches, build, arg_batches=(), batch=4, seed=5, layout=None):
    """Run ``build(data, *args)`` on a CPU node and on its GPU copy, for each batch of
    ``batches`` (lists of numpy samples); ``arg_batches`` are CPU argument-input batches.
    Yields (gpu TensorList copied to the host, cpu TensorList)."""
    it = iter(batches)
    arg_its = [iter(a) for a in arg_batches]
    pipe = Pipeline(batch_size=batch, num_threads=2, device_id=0, seed=seed)
    with pipe:
        data = fn.external_source(lambda: next(it), layout=layout)
        args = [fn.external_source(lambda i=i: next(arg_its[i])) for i in range(len(arg_its))]
        pipe.set_outputs(build(data.gpu(), *args), build(data, *args))
    for _ in range(len(batches)):
        g, c = pipe.run()
        yield g.as_cpu(), c


def _check(g, c, tol=0.0):
    assert len(g) == len(c)
    for i in range(len(c)):
        a, b = np.asarray(g.at(i)), np.asarray(c.at(i))
        assert a.shape == b.shape and a.dtype == b.dtype, (i, a.shape, b.shape, a.dtype, b.dtype)
        if tol == 0:
            np.testing.assert_array_equal(a, b)
        else:
            d = np.abs(a.astype(np.float64) - b.astype(np.float64))
            assert d.max(initial=0) <= tol, (i, d.max())


def _images(n_batches=2, batch=4, dtype=np.uint8, channels=3, seed=0, lo=9, hi=40):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        b = []
        for _ in range(batch):
            h, w = rng.integers(lo, hi, 2)
            shape = (h, w, channels) if channels else (h, w)
            if np.dtype(dtype).kind == "f":
                b.append(rng.uniform(-10, 300, shape).astype(dtype))
            else:
                b.append(rng.integers(0, 256, shape).astype(dtype))
        out.append(b)
    return out


# --- coord_transform ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int16, np.uint16, np.int32])
def test_coord_transform(dtype):
    rng = np.random.default_rng(1)
    batches = [
        [rng.uniform(0, 200, (int(rng.integers(0, 30)), 3)).astype(dtype) for _ in range(4)]
        for _ in range(2)
    ]
    m = [0.5, -1.25, 2.0, 1.5, 0.0, 0.25]
    for g, c in _both(batches, lambda p: fn.coord_transform(p, M=m, T=[3.5, -2.0], dtype=dtype)):
        _check(g, c)
    for g, c in _both(batches, lambda p: fn.coord_transform(p, M=2.0)):
        _check(g, c)


def test_coord_transform_argument_input():
    rng = np.random.default_rng(2)
    batches = [[rng.uniform(-5, 5, (7, 2)).astype(np.float32) for _ in range(4)]]
    angles = [[np.float32(a) for a in (0, 30, 60, 90)]]

    def build(p, a):
        return fn.coord_transform(p, MT=fn.transforms.rotation(angle=a, center=[1.0, 1.0]))

    for g, c in _both(batches, build, (angles,)):
        _check(g, c)


# --- warp_affine / rotate ----------------------------------------------------------------------

_M = [0.913, 0.197, -3.07, -0.103, 1.117, 2.53]


@pytest.mark.parametrize("interp", [types.INTERP_LINEAR, types.INTERP_NN])
@pytest.mark.parametrize("fill", [None, 12.0])
@pytest.mark.parametrize(
    "in_dtype, out_dtype",
    [(np.uint8, None), (np.uint8, np.float32), (np.float32, np.uint8), (np.int16, None)],
)
def test_warp_affine_2d(interp, fill, in_dtype, out_dtype):
    batches = _images(dtype=in_dtype)
    kw = dict(matrix=_M, interp_type=interp, fill_value=fill, dtype=out_dtype)
    for g, c in _both(batches, lambda x: fn.warp_affine(x, **kw)):
        _check(g, c)  # same float32 arithmetic: identical


def test_warp_affine_size_and_matrix_inputs():
    batches = _images()
    rng = np.random.default_rng(3)
    mats = [
        [
            rng.uniform(-1, 1, (2, 3)).astype(np.float32) + np.eye(2, 3, dtype=np.float32)
            for _ in range(4)
        ]
        for _ in range(2)
    ]
    sizes = [[np.array(rng.integers(5, 30, 2), np.float32) for _ in range(4)] for _ in range(2)]

    def build(x, m, s):
        return fn.warp_affine(x, matrix=m, size=s, inverse_map=False, fill_value=0)

    for g, c in _both(batches, build, (mats, sizes)):
        _check(g, c)

    def second_input(x, m):  # the matrices as a GPU input, inverted on the device
        mm = m.gpu() if x.device == "gpu" else m
        return fn.warp_affine(x, mm, inverse_map=False)

    for g, c in _both(batches, second_input, (mats,)):
        _check(g, c, tol=1)  # device vs host inversion: float32 rounding may differ


@pytest.mark.parametrize("fill", [128.0, None])
def test_fused_warp_matches_cpu_and_its_kinds(fill):
    """``_warp_fused`` (AutoAugment's shears, translations and rotation as one operator): GPU
    equal to CPU, and each sample equal to ``warp_affine(inverse_map=False)`` or
    ``rotate(keep_size=True)`` on the GPU."""
    from dlpipe.graph import _call_operator

    batches = _images()
    rng = np.random.default_rng(8)
    mats = [
        [
            rng.uniform(-0.3, 0.3, (2, 3)).astype(np.float32) + np.eye(2, 3, dtype=np.float32)
            for _ in range(4)
        ]
        for _ in range(2)
    ]
    angles = [[np.float32(a) for a in rng.uniform(-135, 135, 4)] for _ in range(2)]
    kinds = [[np.int32(k) for k in (0, 1, 1, 0)], [np.int32(k) for k in (1, 0, 1, 1)]]

    def build(x, m, a, k):
        kw = dict(matrix=m, angle=a, kind=k, fill_value=fill)
        fused = _call_operator("_warp_fused", (x,), kw)[0]
        affine = fn.warp_affine(x, matrix=m, inverse_map=False, fill_value=fill)
        rotate = fn.rotate(x, angle=a, keep_size=True, fill_value=fill)
        return fused, affine, rotate

    it = iter(batches)
    its = [iter(v) for v in (mats, angles, kinds)]
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, seed=5)
    with pipe:
        data = fn.external_source(lambda: next(it))
        args = [fn.external_source(lambda i=i: next(its[i])) for i in range(3)]
        pipe.set_outputs(*build(data.gpu(), *args), build(data, *args)[0])
    for b in range(2):
        fused, affine, rotate, cpu = pipe.run()
        fused, affine, rotate = fused.as_cpu(), affine.as_cpu(), rotate.as_cpu()
        _check(fused, cpu)
        for i, k in enumerate(kinds[b]):
            want = (affine, rotate)[int(k)]
            np.testing.assert_array_equal(np.asarray(fused.at(i)), np.asarray(want.at(i)))


def test_warp_affine_3d_and_sequences():
    rng = np.random.default_rng(4)
    vols = [
        [
            rng.integers(0, 256, (int(rng.integers(3, 9)), 11, 13, 2)).astype(np.uint8)
            for _ in range(4)
        ]
    ]
    m3 = [0.913, 0.137, 0.011, 0.517, -0.093, 1.071, 0.213, -0.291, 0.047, 0.013, 0.787, 0.731]
    for g, c in _both(vols, lambda x: fn.warp_affine(x, matrix=m3, fill_value=3)):
        _check(g, c)
    for g, c in _both(vols, lambda x: fn.rotate(x, angle=20.0, axis=[0.2, 0.3, 1.0])):
        _check(g, c)
    seqs = [[rng.integers(0, 256, (3, 9, 12, 3)).astype(np.uint8) for _ in range(4)]]
    for g, c in _both(seqs, lambda x: fn.warp_affine(x, matrix=_M), layout="FHWC"):
        _check(g, c)
    for g, c in _both(seqs, lambda x: fn.rotate(x, angle=-40.0), layout="FHWC"):
        _check(g, c)


@pytest.mark.parametrize("keep_size", [False, True])
def test_rotate(keep_size):
    batches = _images()
    angles = [[np.float32(a) for a in (0, 33.5, -90, 170)]] * 2
    for g, c in _both(
        batches, lambda x, a: fn.rotate(x, angle=a, keep_size=keep_size, fill_value=0), (angles,)
    ):
        _check(g, c)


# --- gaussian_blur ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64])
@pytest.mark.parametrize("kw", [dict(sigma=1.2), dict(window_size=[3, 9]), dict(sigma=[2.5, 0.6])])
def test_gaussian_blur_2d(dtype, kw):
    for g, c in _both(_images(dtype=dtype), lambda x: fn.gaussian_blur(x, **kw), layout="HWC"):
        _check(g, c)  # same summation order without FMA: identical


def test_gaussian_blur_layouts_and_arguments():
    rng = np.random.default_rng(7)
    vols = [
        [
            rng.integers(0, 256, (int(rng.integers(3, 9)), 10, 12, 2)).astype(np.uint8)
            for _ in range(4)
        ]
    ]
    for g, c in _both(vols, lambda x: fn.gaussian_blur(x, sigma=[0.8, 1.0, 1.5]), layout="DHWC"):
        _check(g, c)
    planes = [
        [rng.uniform(0, 1, (2, int(rng.integers(5, 20)), 9)).astype(np.float32) for _ in range(4)]
    ]
    for g, c in _both(planes, lambda x: fn.gaussian_blur(x, sigma=1.0), layout="CHW"):
        _check(g, c)
    sig = [[np.float32(v) for v in (0.5, 1.0, 3.0, 0.2)]] * 2
    for g, c in _both(
        _images(),
        lambda x, s: fn.gaussian_blur(x, sigma=s, dtype=types.FLOAT),
        (sig,),
        layout="HWC",
    ):
        _check(g, c)


# --- color_space_conversion -------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, dst",
    [
        (s, d)
        for s in ("RGB", "BGR", "GRAY", "YCbCr")
        for d in ("RGB", "BGR", "GRAY", "YCbCr")
        if s != d
    ],
)
def test_color_space_conversion(src, dst):
    channels = 1 if src == "GRAY" else 3
    batches = _images(channels=channels)
    kw = dict(image_type=getattr(types, src), output_type=getattr(types, dst))
    for g, c in _both(batches, lambda x: fn.color_space_conversion(x, **kw), layout="HWC"):
        # to GRAY: DALI's GPU uses float weights, its CPU (and ours) OpenCV's fixed point
        _check(g, c, tol=1 if dst == "GRAY" and src != "YCbCr" else 0)


# --- noise ------------------------------------------------------------------------------------
# The same operator seed gives the same per-sample seeds, and both devices derive every random
# number from them: the outputs agree (up to a last-bit difference of CUDA's and the C library's
# log/cos in rare cases, hence the tolerance of 1 on integers).


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.float32])
def test_noise_gaussian(dtype):
    std = [[np.float32(v) for v in (0.5, 3.0, 10.0, 0.0)]] * 2
    build = lambda x, s: fn.noise.gaussian(x, stddev=s, mean=1.5, seed=11)  # noqa: E731
    for g, c in _both(_images(dtype=dtype), build, (std,), layout="HWC"):
        _check(g, c, tol=1e-3 if dtype == np.float32 else 1)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_noise_salt_and_pepper(per_channel, dtype):
    build = lambda x: fn.noise.salt_and_pepper(x, prob=0.3, per_channel=per_channel, seed=5)  # noqa: E731
    for g, c in _both(_images(dtype=dtype), build, layout="HWC"):
        _check(g, c)  # uniforms are exact: identical


@pytest.mark.parametrize("factor", [0.0, 0.5, 4.0, 60.0])
def test_noise_shot(factor):
    for g, c in _both(_images(), lambda x: fn.noise.shot(x, factor=factor, seed=3), layout="HWC"):
        _check(g, c, tol=factor or 1)  # a rare last-bit exp/log difference moves one count


# --- erase ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int16])
def test_erase(dtype):
    rng = np.random.default_rng(8)
    anchors = [[rng.uniform(-5, 30, 4).astype(np.float32) for _ in range(4)]] * 2
    shapes = [[rng.uniform(0, 20, 4).astype(np.float32) for _ in range(4)]] * 2

    def build(x, a, s):
        return fn.erase(x, anchor=a, shape=s, axis_names="HW", fill_value=(1, 2, 3))

    for g, c in _both(_images(dtype=dtype), build, (anchors, shapes), layout="HWC"):
        _check(g, c)

    def build2(x):
        return fn.erase(
            x,
            anchor=(0.2,),
            shape=(0.5,),
            axis_names="W",
            normalized=True,
            centered_anchor=True,
            fill_value=7,
        )

    for g, c in _both(_images(dtype=dtype), build2, layout="HWC"):
        _check(g, c)


# --- jpeg_compression_distortion ----------------------------------------------------------------
# DALI's GPU operator uses its own kernels (no JPEG codec), and so does ours, but in
# libjpeg-turbo's integer arithmetic: the same bytes as the CPU (OpenCV's libjpeg-turbo round
# trip), including partial MCUs and chroma 1 or 2 samples wide.


@pytest.mark.parametrize("quality", [5, 50, 95])
def test_jpeg_compression_distortion(quality):
    batches = _images(lo=5, hi=70) + _images(n_batches=1, seed=1, lo=1, hi=6)
    for g, c in _both(
        batches,
        lambda x: fn.jpeg_compression_distortion(x, quality=quality),
        layout="HWC",
    ):
        assert g.shape() == c.shape() and g.dtype == c.dtype
        for i in range(len(c)):
            np.testing.assert_array_equal(g.at(i), c.at(i), err_msg=str((quality, i)))
