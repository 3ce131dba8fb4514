"""GPU fn.jpeg_compression_distortion without a GPU: a numpy model of ``jpeg_distortion.cu``
(the same integer steps, written here from libjpeg-turbo's sources) must give the CPU operator's
result (OpenCV's libjpeg-turbo round trip) bit for bit, on noise, gradients and smooth images,
at sizes that exercise every edge case (partial MCUs, odd sizes, chroma 1 or 2 samples wide);
and the descriptor packing matches the CUDA struct.

The kernel this replaced used float DCTs, an unbiased chroma average and an 8-only upsampling
bias, and averaged the padded chroma rows from repeated pixels where libjpeg repeats the last
chroma row: 2 to 12 levels of mean difference on noise images, which these tests catch.
"""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.kernels.jpeg_distortion import JPEG_DESC, jpeg_descriptors, plane_offsets
from dlpipe.operators.jpeg_compression_distortion import (
    CHROMA_TABLE,
    LUMA_TABLE,
    JpegCompressionDistortion,
    quant_table,
)

# FIX(c) = round(c * 2**13), jfdctint.c / jidctint.c
F0298, F0390, F0541, F0765, F0899, F1175 = 2446, 3196, 4433, 6270, 7373, 9633
F1501, F1847, F1961, F2053, F2562, F3072 = 12299, 15137, 16069, 16819, 20995, 25172


def fix16(c):
    """jccolor.c / jdcolor.c fixed point: round(c * 2**16)."""
    return int(c * 65536 + 0.5)


def descale(x, n):
    return (x + (1 << (n - 1))) >> n


def fdct_1d(d, pass1):
    """jpeg_fdct_islow, one pass along the last axis (int64)."""
    d0, d1, d2, d3, d4, d5, d6, d7 = np.moveaxis(d, -1, 0)
    t0, t7, t1, t6 = d0 + d7, d0 - d7, d1 + d6, d1 - d6
    t2, t5, t3, t4 = d2 + d5, d2 - d5, d3 + d4, d3 - d4
    t10, t13, t11, t12 = t0 + t3, t0 - t3, t1 + t2, t1 - t2
    out = np.empty_like(d)
    n = 11 if pass1 else 15
    out[..., 0] = (t10 + t11) * 4 if pass1 else descale(t10 + t11, 2)
    out[..., 4] = (t10 - t11) * 4 if pass1 else descale(t10 - t11, 2)
    z1 = (t12 + t13) * F0541
    out[..., 2] = descale(z1 + t13 * F0765, n)
    out[..., 6] = descale(z1 - t12 * F1847, n)
    z1, z2, z3, z4 = t4 + t7, t5 + t6, t4 + t6, t5 + t7
    z5 = (z3 + z4) * F1175
    t4, t5, t6, t7 = t4 * F0298, t5 * F2053, t6 * F3072, t7 * F1501
    z1, z2 = -z1 * F0899, -z2 * F2562
    z3, z4 = -z3 * F1961 + z5, -z4 * F0390 + z5
    out[..., 7] = descale(t4 + z1 + z3, n)
    out[..., 5] = descale(t5 + z2 + z4, n)
    out[..., 3] = descale(t6 + z2 + z3, n)
    out[..., 1] = descale(t7 + z1 + z4, n)
    return out


def range_limit(v):
    """jdmaster.c's post-IDCT table, indexed with the value masked to 10 bits."""
    m = v & 1023
    return np.where(m < 128, m + 128, np.where(m < 512, 255, np.where(m < 896, 0, m - 896)))


def idct_1d(d, first):
    """jpeg_idct_islow, one pass along the last axis (int64)."""
    d0, d1, d2, d3, d4, d5, d6, d7 = np.moveaxis(d, -1, 0)
    z1 = (d2 + d6) * F0541
    t2, t3 = z1 - d6 * F1847, z1 + d2 * F0765
    t0, t1 = (d0 + d4) * 8192, (d0 - d4) * 8192
    t10, t13, t11, t12 = t0 + t3, t0 - t3, t1 + t2, t1 - t2
    t0, t1, t2, t3 = d7, d5, d3, d1
    z1, z2, z3, z4 = t0 + t3, t1 + t2, t0 + t2, t1 + t3
    z5 = (z3 + z4) * F1175
    t0, t1, t2, t3 = t0 * F0298, t1 * F2053, t2 * F3072, t3 * F1501
    z1, z2 = -z1 * F0899, -z2 * F2562
    z3, z4 = -z3 * F1961 + z5, -z4 * F0390 + z5
    t0, t1, t2, t3 = t0 + z1 + z3, t1 + z2 + z4, t2 + z2 + z3, t3 + z1 + z4
    v = np.stack([t10 + t3, t11 + t2, t12 + t1, t13 + t0, t13 - t0, t12 - t1, t11 - t2, t10 - t3])
    v = np.moveaxis(v, 0, -1)
    return descale(v, 11) if first else range_limit(descale(v, 18))


def code_blocks(plane, quant):
    """Level-shifted samples (H, W), multiples of 8, through FDCT, quantisation,
    dequantisation and IDCT, as jpeg_blocks does per 8x8 block."""
    h, w = plane.shape
    b = plane.reshape(h // 8, 8, w // 8, 8).transpose(0, 2, 1, 3)
    b = fdct_1d(b, True)  # rows
    b = np.swapaxes(fdct_1d(np.swapaxes(b, -1, -2), False), -1, -2)  # columns
    q = quant.reshape(8, 8).astype(np.int64)
    div = 8 * q
    mag = (np.abs(b) + div // 2) // div
    b = np.where(b < 0, -mag, mag) * q
    b = np.swapaxes(idct_1d(np.swapaxes(b, -1, -2), True), -1, -2)  # columns
    b = idct_1d(b, False)  # rows
    return b.transpose(0, 2, 1, 3).reshape(h, w)


def model(img, quant):
    """What jpeg_blocks and jpeg_compose compute for one sample (``quant``: (2, 64))."""
    h, w, _ = img.shape
    ph, pw = -(-h // 16) * 16, -(-w // 16) * 16
    ys, xs = np.minimum(np.arange(ph), h - 1), np.minimum(np.arange(pw), w - 1)
    r, g, b = (img[ys][:, xs, i].astype(np.int64) for i in range(3))
    y = (fix16(0.299) * r + fix16(0.587) * g + fix16(0.114) * b + 32768) >> 16
    off = (128 << 16) + 32767
    cb = (-fix16(0.16874) * r - fix16(0.33126) * g + fix16(0.5) * b + off) >> 16
    cr = (fix16(0.5) * r - fix16(0.41869) * g - fix16(0.08131) * b + off) >> 16
    ch, cw = (h + 1) // 2, (w + 1) // 2
    rows = np.minimum(np.arange(ph // 2), ch - 1)  # padded chroma rows repeat the last one
    bias = np.where(np.arange(pw // 2) % 2, 2, 1)

    def down(c):
        c = c[0::2, 0::2] + c[0::2, 1::2] + c[1::2, 0::2] + c[1::2, 1::2]
        return ((c + bias) >> 2)[rows]

    yd = code_blocks(y - 128, quant[0])[:h, :w]
    cbd, crd = (code_blocks(down(c) - 128, quant[1])[:ch, :cw] for c in (cb, cr))

    yy, xx = np.arange(h)[:, None], np.arange(w)[None, :]
    ny, nx = yy // 2, xx // 2
    if cw > 2:
        fy = np.clip(ny + np.where(yy % 2, 1, -1), 0, ch - 1)
        fx = np.clip(nx + np.where(xx % 2, 1, -1), 0, cw - 1)
        ub = np.where(xx % 2, 7, 8)

        def up(c):
            return (9 * c[ny, nx] + 3 * c[ny, fx] + 3 * c[fy, nx] + c[fy, fx] + ub) >> 4
    else:

        def up(c):
            return c[ny, nx]

    ucb, ucr = up(cbd) - 128, up(crd) - 128
    out = [
        yd + ((fix16(1.402) * ucr + 32768) >> 16),
        yd + ((-fix16(0.34414) * ucb + 32768 - fix16(0.71414) * ucr) >> 16),
        yd + ((fix16(1.772) * ucb + 32768) >> 16),
    ]
    return np.clip(np.stack(out, -1), 0, 255).astype(np.uint8)


def cpu(x, q):
    op = JpegCompressionDistortion(quality=q)
    op.output_layouts(["HWC"])
    return op.run_sample((x,), {}, None)


def tables(q):
    return np.stack([quant_table(LUMA_TABLE, q), quant_table(CHROMA_TABLE, q)])


def images(rng, h, w):
    yy, xx = np.mgrid[0:h, 0:w]
    grad = np.stack([(yy * 7 + xx * 3) % 256, (xx * 11) % 256, (yy * 5 + 40) % 256], -1)
    smooth = np.stack([128 + 100 * np.sin(yy / 9 + xx / 13 + c) for c in range(3)], -1)
    smooth = smooth + rng.normal(0, 8, smooth.shape)
    noise = rng.integers(0, 256, (h, w, 3))
    return [np.clip(a, 0, 255).astype(np.uint8) for a in (noise, grad, smooth)]


@pytest.mark.parametrize("quality", [1, 5, 50, 95, 100])
def test_model_of_the_kernel_is_the_cpu_result(quality):
    rng = np.random.default_rng(quality)
    for h, w in [(14, 45), (60, 46), (16, 16), (17, 33), (9, 4), (4, 3), (3, 2), (1, 1), (37, 1)]:
        for x in images(rng, h, w):
            np.testing.assert_array_equal(model(x, tables(quality)), cpu(x, quality), (h, w))


def test_model_on_random_sizes_and_qualities():
    rng = np.random.default_rng(7)
    for _ in range(12):
        h, w = (int(v) for v in rng.integers(1, 70, 2))
        q = int(rng.integers(1, 101))
        for x in images(rng, h, w):
            np.testing.assert_array_equal(model(x, tables(q)), cpu(x, q), (h, w, q))


def test_padded_chroma_rows_repeat_the_last_chroma_row():
    # Even height, last MCU partial: libjpeg repeats the last averaged chroma row below it;
    # averaging the padding from repeated pixel rows instead changes the edge blocks.
    x = np.random.default_rng(1).integers(0, 256, (14, 10, 3)).astype(np.uint8)
    want = cpu(x, 50)
    np.testing.assert_array_equal(model(x, tables(50)), want)
    assert np.abs(want.astype(int) - x).mean() > 10  # a lossy round trip, not the identity


def test_descriptors_match_the_cuda_struct():
    # jpeg_distortion.cu JpegDesc: 6 int64, then int quant[2][64]
    assert JPEG_DESC.itemsize == 6 * 8 + 2 * 64 * 4 and JPEG_DESC.fields["quant"][1] == 48
    shapes = [(5, 7, 3), (16, 33, 3)]
    qs = [tables(10), tables(90)]
    d = jpeg_descriptors(
        np.array([1000, 2000], np.uint64), np.array([3000, 4000], np.uint64), 1 << 20, shapes, qs
    )
    y_off, c_off, total = plane_offsets(shapes)
    assert d["in_ptr"].tolist() == [1000, 2000] and d["out_ptr"].tolist() == [3000, 4000]
    assert d["h"].tolist() == [5, 16] and d["w"].tolist() == [7, 33]
    assert (d["y_ptr"] - (1 << 20)).tolist() == y_off.tolist()
    assert (d["c_ptr"] - (1 << 20)).tolist() == c_off.tolist()
    # planes: Y (h * w) then Cb and Cr (2 * ceil(h/2) * ceil(w/2)), each 256-aligned
    assert y_off.tolist() == [0, 256 + 256] and c_off.tolist() == [256, 512 + 768]
    assert total == 512 + 768 + 512
    for i in range(2):
        np.testing.assert_array_equal(d["quant"][i], qs[i])
