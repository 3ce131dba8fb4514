"""GPU kernels against their CPU/numpy references on random inputs."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe.kernels.color import color_matrix_batch  # noqa: E402
from dlpipe.kernels.resize import (  # noqa: E402
    CUBIC,
    LANCZOS3,
    LINEAR,
    NEAREST,
    TRIANGULAR,
    resize_batch,
)
from dlpipe.kernels.slice import cast_batch, slice_normalize_batch  # noqa: E402
from dlpipe.operators._resize_params import FilterType, resize_params  # noqa: E402
from dlpipe.operators.resize import resample  # noqa: E402


def _rand_images(rng, n, lo=5, hi=90, c=3, dtype=np.uint8):
    out = []
    for _ in range(n):
        h, w = rng.integers(lo, hi, 2)
        if dtype == np.uint8:
            out.append(rng.integers(0, 256, (h, w, c), dtype=np.uint8))
        else:
            out.append(rng.uniform(-10, 300, (h, w, c)).astype(dtype))
    return out


@pytest.fixture
def stream():
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        yield s
    s.synchronize()


@pytest.mark.parametrize(
    "min_f, mag_f, aa",
    [
        (TRIANGULAR, LINEAR, True),
        (LINEAR, LINEAR, False),
        (NEAREST, NEAREST, False),
        (CUBIC, CUBIC, False),
        (LANCZOS3, LANCZOS3, True),
    ],
)
def test_resize_matches_cpu_resample(stream, min_f, mag_f, aa):
    rng = np.random.default_rng(min_f * 10 + mag_f)
    imgs = _rand_images(rng, 12)
    outs = rng.integers(3, 120, (12, 2))
    params = [resize_params(im.shape[:2], list(o)) for im, o in zip(imgs, outs, strict=True)]
    # a flipped axis and an ROI on two samples
    params[0] = resize_params(imgs[0].shape[:2], [-int(outs[0, 0]), int(outs[0, 1])])
    params[1] = resize_params(
        imgs[1].shape[:2], list(outs[1]), roi_start=[1.5, 2.25], roi_end=[4.0, 5.5]
    )
    got = resize_batch(
        [cupy.asarray(x) for x in imgs],
        [p.dst_size for p in params],
        [p.src_lo for p in params],
        [p.src_hi for p in params],
        min_f,
        mag_f,
        aa,
        stream=stream,
    )
    stream.synchronize()
    for i, (im, p) in enumerate(zip(imgs, params, strict=True)):
        want = resample(im, p, FilterType(min_f), FilterType(mag_f), aa)
        g = cupy.asnumpy(got[i])
        assert g.shape == want.shape, i
        diff = np.abs(g.astype(int) - want.astype(int))
        # Pillow's 8-bit path rounds between its passes: at most 1 grey level apart
        assert diff.max() <= 1, (i, diff.max())


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shrink", [0.5, 1, 3, 6, 30])
def test_resize_kernel_instances_agree(stream, monkeypatch, channels, shrink):
    """The kernel is compiled per widest filter (2/4/8 taps kept in registers, or any) and
    per channel count (1/3/4, or any): each instance gives the generic one's exact values and
    the CPU resample's within one grey level."""
    import dlpipe.kernels.resize as R

    rng = np.random.default_rng(channels * 100 + int(shrink * 10))
    imgs = _rand_images(rng, 8, lo=int(20 * shrink), hi=int(30 * shrink), c=channels)
    outs = rng.integers(16, 28, (8, 2))
    outs[0] = (-outs[0, 0], outs[0, 1])  # a flipped axis
    params = [resize_params(im.shape[:2], list(o)) for im, o in zip(imgs, outs, strict=True)]
    ext = np.concatenate([np.abs(np.subtract(p.src_hi, p.src_lo)) for p in params])
    out = np.concatenate([p.dst_size for p in params])
    widest = int(R._axes(ext, out, TRIANGULAR, LINEAR, True)[3].max())
    args = (
        [cupy.asarray(x) for x in imgs],
        [p.dst_size for p in params],
        [p.src_lo for p in params],
        [p.src_hi for p in params],
    )
    used = []
    get = R._get_resize_kernel
    with monkeypatch.context() as m:
        m.setattr(R, "_get_resize_kernel", lambda *a: used.append(a[3]) or get(*a))
        got = resize_batch(*args, stream=stream)
        m.setattr(R, "MAX_TAPS", ())  # the generic instance
        generic = resize_batch(*args, stream=stream)
    stream.synchronize()
    assert used == [next((t for t in (2, 4, 8) if widest <= t), 0), 0]
    if shrink == 0.5:
        assert used[0] == 2  # enlarging: two taps
    if shrink == 30:
        assert used[0] == 0  # wider than 8 taps
    for i, (im, p) in enumerate(zip(imgs, params, strict=True)):
        g = cupy.asnumpy(got[i])
        np.testing.assert_array_equal(g, cupy.asnumpy(generic[i]))
        want = resample(im, p, FilterType.TRIANGULAR, FilterType.LINEAR, True)
        assert g.shape == want.shape
        assert np.abs(g.astype(int) - want.astype(int)).max() <= 1, i


def test_resize_float_and_dense_output(stream):
    rng = np.random.default_rng(5)
    imgs = _rand_images(rng, 6, dtype=np.float32)
    got = resize_batch([cupy.asarray(x) for x in imgs], [(32, 48)] * 6, stream=stream)
    stream.synchronize()
    assert got.dense is not None and got.dense.shape == (6, 32, 48, 3)
    for i, im in enumerate(imgs):
        want = resample(im, resize_params(im.shape[:2], [32, 48]))
        np.testing.assert_allclose(cupy.asnumpy(got[i]), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("out_dtype", [np.float32, np.float16, np.uint8, np.int8])
@pytest.mark.parametrize("planar", [True, False])
def test_crop_mirror_normalize_fused(stream, out_dtype, planar):
    rng = np.random.default_rng(7)
    imgs = _rand_images(rng, 10, lo=40, hi=80)
    n = len(imgs)
    ch, cw = 24, 30
    y0 = np.array([rng.integers(-3, im.shape[0] - ch + 3) for im in imgs])  # some out of bounds
    x0 = np.array([rng.integers(-3, im.shape[1] - cw + 3) for im in imgs])
    mirror = rng.integers(0, 2, n)
    mean = np.array([0.485, 0.456, 0.406]) * 255
    std = np.array([0.229, 0.224, 0.225]) * 255
    scale, shift = (1.0, 0.0) if out_dtype in (np.float32, np.float16) else (64.0, 3.0)
    got = slice_normalize_batch(
        [cupy.asarray(x) for x in imgs],
        ch,
        cw,
        y0,
        x0,
        flip_x=mirror,
        mean=mean,
        mul=scale / std,
        shift=shift,
        fill=7,
        out_dtype=out_dtype,
        out_channels=4,
        planar=planar,
        stream=stream,
    )
    stream.synchronize()
    for i, im in enumerate(imgs):
        pad = np.zeros((ch, cw, 3), np.float64)
        for y in range(ch):
            for x in range(cw):
                sy, sx = y0[i] + y, x0[i] + (cw - 1 - x if mirror[i] else x)
                inside = 0 <= sy < im.shape[0] and 0 <= sx < im.shape[1]
                pad[y, x] = (im[sy, sx] - mean) / std * scale + shift if inside else np.nan
        want = np.concatenate([pad, np.full((ch, cw, 1), np.nan)], axis=2)
        want = np.where(np.isnan(want), 7.0, want)
        if np.issubdtype(out_dtype, np.integer):
            info = np.iinfo(out_dtype)
            want = np.clip(np.rint(want), info.min, info.max)
        if planar:
            want = want.transpose(2, 0, 1)
        g = cupy.asnumpy(got[i]).astype(np.float64)
        assert got[i].dtype == out_dtype and g.shape == want.shape
        tol = 1e-3 if out_dtype == np.float32 else (2e-3 if out_dtype == np.float16 else 0)
        if tol:
            np.testing.assert_allclose(g, want, rtol=tol, atol=tol)
        else:
            assert np.abs(g - want).max() <= 1  # a float tie may round the other way


@pytest.mark.parametrize(
    "src, dst",
    [
        (np.float32, np.uint8),
        (np.uint8, np.float16),
        (np.int32, np.int16),
        (np.float32, np.int32),
        (np.float16, np.float32),
    ],
)
def test_cast_rounds_and_saturates(stream, src, dst):
    rng = np.random.default_rng(1)
    samples = [
        rng.uniform(-70000, 70000, shape).astype(src)
        if src != np.uint8
        else rng.integers(0, 256, shape).astype(np.uint8)
        for shape in [(3, 4), (5, 1), (2, 7)]
    ]
    got = cast_batch([cupy.asarray(x) for x in samples], dst, stream=stream)
    stream.synchronize()
    for i, x in enumerate(samples):
        want = x.astype(np.float64)
        if np.issubdtype(dst, np.integer):
            info = np.iinfo(dst)
            want = np.clip(np.rint(want), info.min, info.max)
        want = want.astype(dst)
        np.testing.assert_array_equal(cupy.asnumpy(got[i]), want)


def test_color_matrix(stream):
    rng = np.random.default_rng(2)
    imgs = _rand_images(rng, 5)
    m = rng.uniform(-1, 1.5, (5, 3, 3))
    off = rng.uniform(-20, 20, (5, 3))
    got = color_matrix_batch([cupy.asarray(x) for x in imgs], m, off, stream=stream)
    stream.synchronize()
    for i, im in enumerate(imgs):
        want = np.clip(np.rint(im.astype(np.float64) @ m[i].T + off[i]), 0, 255)
        assert np.abs(cupy.asnumpy(got[i]).astype(int) - want).max() <= 1


def test_copy_batch_packs_contiguous_pitched_and_misaligned_images(stream):
    from dlpipe.kernels.copy import CHUNK, copy_batch, copy_descriptors

    rng = np.random.default_rng(7)
    srcs, ptrs, pitches, rows, row_bytes = [], [], [], [], []
    for k in range(40):
        h, w = (int(v) for v in rng.integers(1, 300, 2))
        c = (1, 3, 4)[k % 3]
        host = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        if k % 4 == 1:  # pitched rows: a view of a wider image
            dev = cupy.asarray(np.pad(host, ((0, 0), (0, 7), (0, 0))))[:, :w]
        elif k % 4 == 2:  # a start that is not 16-byte aligned
            flat = cupy.zeros(host.size + 3, np.uint8)
            flat[3:] = cupy.asarray(host.ravel())
            dev = flat[3:].reshape(host.shape)
        elif k == 3:  # a large one: many CHUNK rows, the last one short
            host = rng.integers(0, 256, (CHUNK // 3 + 5, 7, 3), dtype=np.uint8)
            dev = cupy.asarray(host)
        else:
            dev = cupy.asarray(host)
        srcs.append((host, dev))
        ptrs.append(dev.data.ptr)
        pitches.append(dev.strides[0])
        rows.append(dev.shape[0])
        row_bytes.append(dev.shape[1] * dev.shape[2])
    sizes = [h.nbytes for h, _ in srcs]
    offsets = np.concatenate([[0], np.cumsum([-(-s // 256) * 256 for s in sizes])])
    out = cupy.full(int(offsets[-1]) + 64, 0xAB, np.uint8)  # + a guard: nothing written past
    descs = copy_descriptors(ptrs, out.data.ptr + offsets[:-1], pitches, row_bytes, rows)
    copy_batch(descs, out.device.id, stream)
    got = cupy.asnumpy(out, stream=stream)
    stream.synchronize()
    for (host, _), off, size in zip(srcs, offsets, sizes, strict=False):
        np.testing.assert_array_equal(got[off : off + size], host.ravel())
        assert (got[off + size : -(-(off + size) // 256) * 256] == 0xAB).all()  # the gap
    assert (got[-64:] == 0xAB).all()
