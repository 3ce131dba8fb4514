"""``fn.brightness_contrast``, ``fn.brightness`` and ``fn.contrast``.

DALI (``brightness_contrast.h``, kernel ``MultiplyAddCpu``)::

    out = brightness_shift * R + brightness * (contrast_center + contrast * (in - contrast_center))

with ``R`` = 1 for a float output and the type's maximum for an integer one, and
``contrast_center`` defaulting to half the input type's positive range (0.5 for float, 128 for
uint8, 16384 for int16, 2**30 for int32). It is evaluated in float32 as ``in * mul + add``
(``mul = brightness * contrast``, ``add = brightness_shift * R + brightness * (center -
contrast * center)``) and converted with rounding half away from zero and saturation.

A uint8 input goes through a 256-entry lookup table (one pass; the table holds exactly the
values the float32 formula gives).
"""

from __future__ import annotations

import cv2
import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import alloc_batch, as_samples, fold_rows, host_numbers, unfold_rows
from ..kernels.slice import affine_batch
from . import _small
from .cast import convert_sat, parse_dtype

__all__ = ["Brightness", "BrightnessContrast", "Contrast", "apply_lut", "full_range", "half_range"]

_TYPES = (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.float16, np.float32, np.float64)


def full_range(dt: np.dtype) -> float:
    """1.0 for floats, the maximum for integers (DALI's ``FullRange``)."""
    dt = np.dtype(dt)
    return float(np.iinfo(dt).max) if dt.kind in "iu" else 1.0


def half_range(dt: np.dtype) -> float:
    """0.5 for floats, ``2 ** (bits - signed - 1)`` for integers (DALI's ``HalfRange``)."""
    dt = np.dtype(dt)
    if dt.kind in "iu":
        return float(1 << (8 * dt.itemsize - (dt.kind == "i") - 1))
    return 0.5


def apply_lut(x: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """``lut[x]`` for a uint8 ``x`` and a 256-entry table (OpenCV's LUT when it can)."""
    if (
        x.flags.c_contiguous
        and x.size
        and lut.dtype in (np.uint8, np.int8, np.int16, np.uint16, np.int32, np.float32)
    ):
        flat = x.reshape(-1, 1)
        if flat.shape[0] < 2**31:
            return cv2.LUT(flat, lut.reshape(256, 1)).reshape(x.shape)
    return lut[x]


def _finite_number(v) -> bool:
    try:
        return not np.ndim(v) and bool(np.isfinite(float(v)))
    except (TypeError, ValueError):
        return False


def _check_input(x: np.ndarray, who: str) -> None:
    if x.dtype not in _TYPES:
        raise ArgumentError(f"{who}: input type {x.dtype} is not supported")


class _BrightnessContrastBase(Operator):
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"brightness", "brightness_shift", "contrast"})

    def _setup(self, brightness, brightness_shift, contrast, contrast_center, dtype) -> None:
        for name, v in (
            ("brightness", brightness),
            ("brightness_shift", brightness_shift),
            ("contrast", contrast),
        ):
            if not _finite_number(v):
                raise ArgumentError(f"{self.schema}: {name}={v!r} must be a finite number")
        self.brightness = float(brightness)
        self.brightness_shift = float(brightness_shift)
        self.contrast = float(contrast)
        if contrast_center is not None and not _finite_number(contrast_center):
            raise ArgumentError(
                f"{self.schema}: contrast_center={contrast_center!r} must be a finite number"
            )
        self.contrast_center = None if contrast_center is None else float(contrast_center)
        self.dtype = parse_dtype(dtype, self.schema, allowed=_TYPES)

    def output_layouts(self, input_layouts):
        return [input_layouts[0] if input_layouts else ""]

    def _arg(self, args: dict, name: str) -> float:
        v = args.get(name)
        return getattr(self, name) if v is None else float(np.asarray(v).reshape(-1)[0])

    def _mul_add(self, args: dict, in_dt: np.dtype, out_dt: np.dtype):
        b = np.float32(self._arg(args, "brightness"))
        s = np.float32(self._arg(args, "brightness_shift"))
        c = np.float32(self._arg(args, "contrast"))
        center = np.float32(
            self.contrast_center if self.contrast_center is not None else half_range(in_dt)
        )
        mul = np.float32(b * c)
        add = np.float32(s * np.float32(full_range(out_dt)) + b * (center - c * center))
        return mul, add

    def _mul_adds(self, args: dict, n: int, in_dt: np.dtype, out_dt: np.dtype):
        """:meth:`_mul_add` of every sample, as float64 (N,) arrays, with numpy over the batch
        (the same float32 operations elementwise); argument values that are not numbers go
        sample by sample."""
        vals = {}
        for name in ("brightness", "brightness_shift", "contrast"):
            if name in args:
                v = host_numbers(args[name], kinds="iuf")  # (0-d samples: read at once)
                if v is None or len(v) != n:
                    a = _small.stack(args[name])
                    if a is None or a.dtype.kind not in "iuf" or a.size < n:
                        return self._sample_mul_adds(args, n, in_dt, out_dt)
                    v = a.reshape(n, -1)[:, 0].astype(np.float64)
            else:
                v = np.full(n, getattr(self, name))
            vals[name] = v.astype(np.float32)
        b, s, c = vals["brightness"], vals["brightness_shift"], vals["contrast"]
        center = np.float32(
            self.contrast_center if self.contrast_center is not None else half_range(in_dt)
        )
        mul = b * c
        add = s * np.float32(full_range(out_dt)) + b * (center - c * center)
        return mul.astype(np.float64), add.astype(np.float64)

    def _sample_mul_adds(self, args: dict, n: int, in_dt: np.dtype, out_dt: np.dtype):
        mul, add = np.ones(n, np.float64), np.zeros(n, np.float64)
        for i in range(n):
            mul[i], add[i] = self._mul_add({k: v[i] for k, v in args.items()}, in_dt, out_dt)
        return mul, add

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        _check_input(x, self.schema)
        out_dt = self.dtype or x.dtype
        mul, add = self._mul_add(args, x.dtype, out_dt)
        if x.dtype == np.uint8:
            lut = np.arange(256, dtype=np.float32) * mul + add
            return apply_lut(x, convert_sat(lut, out_dt))
        y = np.multiply(x, mul, dtype=np.float32)
        y += add
        return y if out_dt == np.float32 else convert_sat(y, out_dt)

    def run_batch(self, inputs, args, params, stream):
        """GPU: ``in * mul + add`` with per-sample factors, one launch. Any sample shape, as on
        the CPU: HWC and HW as they are, the leading dimensions of FHWC, DHWC, ... folded into
        the rows (a per-sample factor applies to every frame); integer outputs round half to
        even there."""
        s = as_samples(inputs[0])
        n = len(s)
        in_dt = np.dtype(s.dtype)
        if in_dt not in _TYPES:
            raise ArgumentError(f"{self.schema}: input type {in_dt} is not supported")
        out_dt = self.dtype or in_dt
        if n == 0:
            return alloc_batch(np.zeros((0, 0), np.int64), out_dt, s.device_id)
        folded, shapes = fold_rows(s, 3 if s.shapes.shape[1] >= 3 else 2)
        mul, add = self._mul_adds(args, n, in_dt, out_dt)
        # (N, 1): one factor per sample for every channel (a 1-D list would mean per channel)
        out = affine_batch(folded, mul.reshape(n, 1), add, out_dtype=out_dt, stream=stream)
        return unfold_rows(out, shapes)


@register(legacy=("BrightnessContrast",))
class BrightnessContrast(_BrightnessContrastBase):
    """Adjusts brightness and contrast:
    ``out = brightness_shift * R + brightness * (contrast_center + contrast * (in - contrast_center))``
    (``R`` = 1 for float output, the type's maximum for integers).

    Args:
        brightness: multiplier (default 1.0); per-sample argument input allowed.
        brightness_shift: additive shift in output units of ``R`` (default 0.0); argument input
            allowed.
        contrast: contrast multiplier, 0 gives uniform grey (default 1.0); argument input
            allowed.
        contrast_center: the level contrast does not move (default: half the input type's
            positive range: 128 for uint8, 0.5 for float).
        dtype: output type (default: the input's); integers round and saturate.

    Example:
        >>> with pipe:
        ...     out = fn.brightness_contrast(images, brightness=fn.random.uniform(range=(0.5, 1.5)))
    """

    schema = "brightness_contrast"

    def setup(
        self,
        *,
        brightness=1.0,
        brightness_shift=0.0,
        contrast=1.0,
        contrast_center=None,
        dtype=None,
    ) -> None:
        self._setup(brightness, brightness_shift, contrast, contrast_center, dtype)


@register(legacy=("Brightness",))
class Brightness(_BrightnessContrastBase):
    """Adjusts brightness: ``out = brightness_shift * R + brightness * in``.

    Args:
        brightness: multiplier (default 1.0); per-sample argument input allowed.
        brightness_shift: shift in units of ``R`` (1 for float output, the type's maximum for
            integers; default 0.0); argument input allowed.
        dtype: output type (default: the input's).
    """

    schema = "brightness"
    arg_inputs = frozenset({"brightness", "brightness_shift"})

    def setup(self, *, brightness=1.0, brightness_shift=0.0, dtype=None) -> None:
        self._setup(brightness, brightness_shift, 1.0, None, dtype)


@register(legacy=("Contrast",))
class Contrast(_BrightnessContrastBase):
    """Adjusts contrast: ``out = contrast_center + contrast * (in - contrast_center)``.

    Args:
        contrast: multiplier, 0 gives uniform grey (default 1.0); argument input allowed.
        contrast_center: the unchanged level (default: half the input type's positive range).
        dtype: output type (default: the input's).
    """

    schema = "contrast"
    arg_inputs = frozenset({"contrast"})

    def setup(self, *, contrast=1.0, contrast_center=None, dtype=None) -> None:
        self._setup(1.0, 0.0, contrast, contrast_center, dtype)
