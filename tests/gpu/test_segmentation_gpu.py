"""GPU forms of the segmentation and volume operators against their CPU forms: resize's
save_attrs output, 3-D crop / flip / resize, and images with their masks transformed alike."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402


def _source(samples, layout):
    return fn.external_source(lambda: samples, layout=layout)


def test_resize_save_attrs_on_gpu():
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 255, s, dtype=np.uint8) for s in ((30, 40, 3), (17, 9, 3))]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        x = _source(imgs, "HWC")
        g_out, g_attrs = fn.resize(x.gpu(), resize_x=16, resize_y=12, save_attrs=True)
        c_out, c_attrs = fn.resize(x, resize_x=16, resize_y=12, save_attrs=True)
        pipe.set_outputs(g_out, g_attrs, c_out, c_attrs)
    pipe.build()
    g_out, g_attrs, c_out, c_attrs = pipe.run()
    assert g_attrs.dtype == types.INT32
    g_attrs = g_attrs.as_cpu()
    for i, img in enumerate(imgs):
        np.testing.assert_array_equal(g_attrs.at(i), img.shape[:2])
        np.testing.assert_array_equal(g_attrs.at(i), c_attrs.at(i))
        d = np.abs(g_out.as_cpu().at(i).astype(int) - c_out.at(i))
        assert d.max() <= 1


def _volumes(layout, n=4, seed=0, dtype=np.uint8):
    rng = np.random.default_rng(seed)
    shapes = {
        "DHWC": lambda i: (5 + i, 7, 9 - i, 2),
        "CDHW": lambda i: (3, 5 + i, 7, 9 - i),
        "FDHWC": lambda i: (2, 4 + i, 6, 5, 1),
    }[layout]
    return [rng.integers(0, 255, shapes(i)).astype(dtype) for i in range(n)]


def _gpu_and_cpu(samples, layout, build, args=()):
    """build(node, *arg_nodes) on the GPU copy and on the CPU; both batches as numpy lists."""
    pipe = Pipeline(batch_size=len(samples), num_threads=1, device_id=0)
    with pipe:
        x = _source(samples, layout)
        arg_nodes = [fn.external_source(lambda a=a: a) for a in args]
        pipe.set_outputs(build(x.gpu(), *arg_nodes), build(x, *arg_nodes))
    pipe.build()
    g, c = pipe.run()
    assert g.layout() == c.layout() == layout
    g = g.as_cpu()
    return [g.at(i) for i in range(len(samples))], [c.at(i) for i in range(len(samples))]


@pytest.mark.parametrize("layout", ["DHWC", "CDHW", "FDHWC"])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_crop_3d_gpu_matches_cpu(layout, dtype):
    vols = _volumes(layout, dtype=dtype)
    px = [np.float32(v) for v in (0.0, 0.3, 0.7, 1.0)]
    pz = [np.float32(v) for v in (1.0, 0.5, 0.2, 0.0)]
    g, c = _gpu_and_cpu(
        vols,
        layout,
        lambda x, a, b: fn.crop(
            x,
            crop=(4, 5, 6),
            crop_pos_x=a,
            crop_pos_z=b,
            out_of_bounds_policy="pad",
            fill_values=3,
        ),
        (px, pz),
    )
    for gi, ci in zip(g, c, strict=True):
        assert gi.shape == ci.shape and gi.dtype == ci.dtype
        np.testing.assert_array_equal(gi, ci)


@pytest.mark.parametrize("layout", ["DHWC", "CDHW", "FDHWC"])
def test_flip_3d_gpu_matches_cpu(layout):
    vols = _volumes(layout, seed=1)
    d = [np.int32(i % 2) for i in range(4)]
    h = [np.int32(i // 2) for i in range(4)]
    g, c = _gpu_and_cpu(
        vols, layout, lambda x, a, b: fn.flip(x, depthwise=a, horizontal=b, vertical=1), (d, h)
    )
    for gi, ci in zip(g, c, strict=True):
        np.testing.assert_array_equal(gi, ci)


@pytest.mark.parametrize("layout", ["DHWC", "CDHW", "FDHWC"])
@pytest.mark.parametrize(
    "kw",
    [
        dict(size=(4, 5, 6)),
        dict(size=(9, 3, 12), interp_type=types.INTERP_NN),
        dict(resize_z=7),
        dict(size=(3, 8, 5), interp_type=types.INTERP_CUBIC, dtype=types.FLOAT),
    ],
)
def test_resize_3d_gpu_matches_cpu(layout, kw):
    vols = _volumes(layout, seed=2)
    g, c = _gpu_and_cpu(vols, layout, lambda x: fn.resize(x, **kw))
    for gi, ci in zip(g, c, strict=True):
        assert gi.shape == ci.shape and gi.dtype == ci.dtype
        assert np.abs(gi.astype(np.float64) - ci).max() <= 1.0 + 1e-3


@pytest.mark.parametrize("layout", ["CHW", "FHWC"])
def test_resize_2d_other_layouts_gpu_matches_cpu(layout):
    rng = np.random.default_rng(3)
    shape = {"CHW": (3, 20, 30), "FHWC": (2, 20, 30, 3)}[layout]
    imgs = [rng.integers(0, 255, shape, dtype=np.uint8) for _ in range(3)]
    g, c = _gpu_and_cpu(imgs, layout, lambda x: fn.resize(x, size=(11, 17)))
    for gi, ci in zip(g, c, strict=True):
        assert gi.shape == ci.shape
        assert np.abs(gi.astype(int) - ci).max() <= 1


def test_resize_3d_save_attrs_on_gpu():
    vols = _volumes("CDHW", seed=4)
    pipe = Pipeline(batch_size=len(vols), num_threads=1, device_id=0)
    with pipe:
        x = _source(vols, "CDHW")
        out, attrs = fn.resize(x.gpu(), size=(4, 4, 4), save_attrs=True)
        pipe.set_outputs(out, attrs)
    pipe.build()
    out, attrs = pipe.run()
    attrs = attrs.as_cpu()
    for i, v in enumerate(vols):
        np.testing.assert_array_equal(attrs.at(i), v.shape[1:])


# --- an image and its mask transformed alike on the GPU ---------------------------------------


def _coords_and_ids(h, w):
    y, x = np.mgrid[:h, :w].astype(np.float32)
    return np.stack([x, y], axis=-1), np.arange(h * w, dtype=np.int32).reshape(h, w, 1)


def _aligned(img, mask, width, exact):
    mx, my = mask[..., 0] % width, mask[..., 0] // width
    tol = 0 if exact else 0.5 + 1e-3
    assert np.abs(mx - img[..., 0]).max() <= tol
    assert np.abs(my - img[..., 1]).max() <= tol


@pytest.mark.parametrize("case", ["crop_flip", "resize", "random_resized_crop"])
def test_image_and_mask_stay_aligned_on_gpu(case):
    sizes = [(23, 31), (40, 18), (17, 17), (30, 44)]
    pairs = [_coords_and_ids(*s) for s in sizes]
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, seed=5)
    with pipe:
        img = fn.external_source(lambda: [p[0] for p in pairs], layout="HWC").gpu()
        mask = fn.external_source(lambda: [p[1] for p in pairs], layout="HWC").gpu()
        if case == "crop_flip":
            px, py = fn.random.uniform(range=(0, 1)), fn.random.uniform(range=(0, 1))
            h, v = fn.random.coin_flip(), fn.random.coin_flip()
            outs = [
                fn.flip(fn.crop(x, crop=(12, 15), crop_pos_x=px, crop_pos_y=py),
                        horizontal=h, vertical=v)
                for x in (img, mask)
            ]  # fmt: skip
        elif case == "resize":
            size = fn.random.uniform(range=(8, 50), shape=2)
            outs = [
                fn.resize(img, size=size, antialias=False),
                fn.resize(mask, size=size, interp_type=types.INTERP_NN),
            ]
        else:
            outs = [
                fn.random_resized_crop(img, size=(20, 24), seed=9, antialias=False),
                fn.random_resized_crop(mask, size=(20, 24), seed=9, interp_type=types.INTERP_NN),
            ]
        pipe.set_outputs(*outs)
    pipe.build()
    for _ in range(3):
        a, m = (o.as_cpu() for o in pipe.run())
        for i, (_, w) in enumerate(sizes):
            _aligned(a.at(i), m.at(i), w, exact=case == "crop_flip")
