"""``fn.jpeg_compression_distortion``: JPEG compression artifacts (DALI's
``JpegCompressionDistortion``).

CPU: as DALI's CPU operator, the image is encoded with OpenCV's JPEG encoder at ``quality``
(baseline, 4:2:0 chroma subsampling, the standard tables scaled by libjpeg's quality rule) and
decoded back. GPU: no JPEG codec. DALI's GPU operator has kernels of its own, a float
approximation (its tests allow a mean difference from OpenCV of up to 5 levels); ours
(``kernels/jpeg_distortion.cu``) runs the lossy steps of libjpeg-turbo's encoder and decoder in
libjpeg-turbo's integer arithmetic (fixed-point colour conversion, biased 2x2 chroma average,
edge padding, LL&M integer DCTs, its quantisation rounding, "fancy" chroma upsampling), so it
gives the CPU result bit for bit where OpenCV is built on libjpeg-turbo (its bundled codec).
"""

from __future__ import annotations

import cv2
import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register

__all__ = ["JpegCompressionDistortion", "quant_table", "LUMA_TABLE", "CHROMA_TABLE"]

# ITU-T T.81 Annex K tables, row-major (vertical frequency, horizontal frequency)
LUMA_TABLE = np.array(
    [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
     14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
     18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
     49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99],
    np.int64,
)  # fmt: skip
CHROMA_TABLE = np.array(
    [17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99,
     24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99] + [99] * 32,
    np.int64,
)  # fmt: skip


def clamp_quality(q) -> int:
    """DALI clamps the quality to 1..100."""
    return int(min(max(int(q), 1), 100))


def quant_table(base: np.ndarray, quality: int) -> np.ndarray:
    """libjpeg's ``jpeg_quality_scaling`` applied to a base table (baseline: 1..255)."""
    q = clamp_quality(quality)
    scale = 5000 // q if q < 50 else 200 - 2 * q
    return np.clip((base * scale + 50) // 100, 1, 255)


def jpeg_roundtrip(x: np.ndarray, quality: int) -> np.ndarray:
    """Encode an RGB uint8 HWC image as JPEG with OpenCV and decode it back."""
    if x.size == 0:
        return x.copy()
    bgr = cv2.cvtColor(np.ascontiguousarray(x), cv2.COLOR_RGB2BGR)
    ok, enc = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, clamp_quality(quality)])
    if not ok:
        raise RuntimeError("jpeg_compression_distortion: OpenCV failed to encode the image")
    out = cv2.imdecode(enc, cv2.IMREAD_COLOR)
    return cv2.cvtColor(out, cv2.COLOR_BGR2RGB)


@register(legacy=("JpegCompressionDistortion",))
class JpegCompressionDistortion(Operator):
    """Introduces JPEG compression artifacts to RGB images (uint8, HWC): the image is
    compressed at ``quality`` and decompressed.

    Args:
        quality: JPEG quality, 1 (lowest) to 100 (default 50); values outside are clamped.
            Per-sample argument input allowed.

    Example:
        >>> with pipe:
        ...     images = fn.jpeg_compression_distortion(
        ...         images, quality=fn.random.uniform(range=(20, 95), dtype=types.INT32))
    """

    schema = "jpeg_compression_distortion"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"quality"})

    def setup(self, *, quality=50) -> None:
        self.quality = self._quality(quality)

    def _quality(self, value) -> int:
        v = np.asarray(value).reshape(-1)
        if v.size != 1 or v.dtype.kind not in "iuf":
            raise ArgumentError(f"{self.schema}: quality={value!r} must be a single number")
        return clamp_quality(v[0])

    def output_layouts(self, input_layouts):
        layout = input_layouts[0] if input_layouts else ""
        if layout not in ("", "HWC"):
            raise ArgumentError(
                f"{self.schema}: input layout {layout!r} is not supported; use HWC RGB images"
            )
        return [layout]

    def check_input(self, dtype, shape) -> None:
        if np.dtype(dtype) != np.uint8:
            raise ArgumentError(f"{self.schema}: the input must be uint8, got {np.dtype(dtype)}")
        if len(shape) != 3 or shape[2] != 3:
            raise ArgumentError(
                f"{self.schema}: expected RGB samples with HWC layout, got shape {tuple(shape)}"
            )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self.check_input(x.dtype, x.shape)
        q = self._quality(args["quality"]) if "quality" in args else self.quality
        return jpeg_roundtrip(x, q)

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.jpeg_distortion import jpeg_distortion_batch

        s = inputs[0]
        for shape in s.shapes:
            self.check_input(s.dtype, shape)
        qs = [self._quality(v) for v in args["quality"]] if "quality" in args else None
        if qs is None:
            qs = [self.quality] * len(s)
        tables = [(quant_table(LUMA_TABLE, q), quant_table(CHROMA_TABLE, q)) for q in qs]
        return jpeg_distortion_batch(s, tables, stream=stream)
