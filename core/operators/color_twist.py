"""``fn.color_twist``, ``fn.hsv``, ``fn.hue`` and ``fn.saturation``: colour adjustments done, as
in DALI (``color_twist.h``), as one 3x3 linear transform of each RGB pixel through YIQ space::

    M = brightness * contrast * YIQ->RGB * Hue(hue) * Sat(saturation) * value * RGB->YIQ
    out = M @ rgb + (half - half * contrast) * brightness

``Hue`` rotates the I/Q plane by ``hue`` degrees, ``Sat`` scales I and Q; ``half`` is 0.5 for
float inputs and 128 for integer ones. The matrices are composed in float32 in DALI's order;
the transform runs in float32 (OpenCV's ``cv2.transform``) and the result is converted with
rounding half away from zero and saturation.

Differences from DALI, on purpose: ``dtype`` defaults to the input type (DALI's schema default
for ``hsv``/``hue``/``saturation`` is UINT8 although its documentation says "the input type");
``image_type=BGR`` permutes the transform so it acts on the right channels (DALI ignores it).
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import alloc_batch, as_samples, fold_rows, host_numbers, unfold_rows
from ..kernels.color import color_matrix_batch
from ..types import DALIImageType, to_image_type
from . import _small
from .brightness_contrast import _finite_number
from .cast import convert_sat, parse_dtype

__all__ = ["ColorTwist", "Hsv", "Hue", "Saturation", "color_matrices", "color_matrix"]

RGB2YIQ = np.array(
    [[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]], np.float32
)
# The exact inverse of RGB2YIQ, as DALI 2.4 composes it: its CPU hsv with hue 0, saturation 1
# and value 1 returns the input to 2e-5, and its hsv, hue, saturation and color_twist agree with
# this matrix to 3e-5 (with the rounded [[1, .956, .621], [1, -.272, -.647], [1, -1.107, 1.705]]
# they were up to 0.6 of 255 off; measured 2026-11-27, /tmp DALI 2.4 CPU).
YIQ2RGB = np.linalg.inv(RGB2YIQ.astype(np.float64)).astype(np.float32)

_TYPES = (np.uint8, np.int16, np.int32, np.float16, np.float32)


def color_matrix(
    hue: float = 0.0,
    saturation: float = 1.0,
    value: float = 1.0,
    brightness: float = 1.0,
    contrast: float = 1.0,
) -> np.ndarray:
    """The 3x3 float32 RGB transform for the given adjustments (see the module doc)."""
    h = np.float32(hue * math.pi / 180)
    c, s = np.cos(h), np.sin(h)
    hue_m = np.eye(3, dtype=np.float32)
    hue_m[1, 1] = hue_m[2, 2] = c
    hue_m[1, 2] = s
    hue_m[2, 1] = -s
    sat_m = np.diag(np.array([1, saturation, saturation], np.float32))
    m = np.float32(brightness) * np.float32(contrast) * YIQ2RGB
    for factor in (hue_m, sat_m, np.float32(value) * np.eye(3, dtype=np.float32), RGB2YIQ):
        m = (m @ factor).astype(np.float32)
    return m


def color_matrices(hue, saturation, value, brightness, contrast) -> np.ndarray:
    """:func:`color_matrix` of a batch at once: (N,) float64 adjustments in, (N, 3, 3)
    float32 out, with the same float32 operations elementwise and the same 3x3 products
    (``numpy.matmul`` of each), so the same values."""
    f32 = np.float32
    h = (np.asarray(hue, np.float64) * math.pi / 180).astype(f32)
    n = len(h)
    c, s = np.cos(h), np.sin(h)
    hue_m = np.zeros((n, 3, 3), f32)
    hue_m[:, 0, 0] = 1
    hue_m[:, 1, 1] = hue_m[:, 2, 2] = c
    hue_m[:, 1, 2] = s
    hue_m[:, 2, 1] = -s
    sat_m = np.zeros((n, 3, 3), f32)
    sat_m[:, 0, 0] = 1
    sat_m[:, 1, 1] = sat_m[:, 2, 2] = np.asarray(saturation, f32)
    val_m = np.asarray(value, f32)[:, None, None] * np.eye(3, dtype=f32)  # (-0 off the diagonal)
    bc = np.asarray(brightness, f32) * np.asarray(contrast, f32)
    m = bc[:, None, None] * YIQ2RGB
    for factor in (hue_m, sat_m, val_m, RGB2YIQ):
        m = m @ factor
    return m


def apply_color_matrix(
    x: np.ndarray, m: np.ndarray, offset: float, out_dt: np.dtype, bgr: bool = False
) -> np.ndarray:
    """``out = m @ pixel + offset`` over the last (channel) axis of ``x``, in float32."""
    if bgr:
        m = m[::-1, ::-1]
    aug = np.empty((3, 4), np.float32)
    aug[:, :3] = m
    aug[:, 3] = offset
    f = x.astype(np.float32, copy=False).reshape(-1, 1, 3)
    if f.shape[0] >= 2**31 or f.shape[0] == 0:
        y = (f.reshape(-1, 3) @ m.T + np.float32(offset)).astype(np.float32)
    else:
        y = cv2.transform(f, aug)
    y = y.reshape(x.shape)
    return y if out_dt == np.float32 else convert_sat(y, out_dt)


class _ColorBase(Operator):
    devices = ("cpu", "gpu")
    _args: tuple[tuple[str, float], ...] = ()

    def _setup(self, dtype, image_type, **values) -> None:
        for name, v in values.items():
            if not _finite_number(v):
                raise ArgumentError(f"{self.schema}: {name}={v!r} must be a finite number")
            setattr(self, name, float(v))
        self.dtype = parse_dtype(dtype, self.schema, allowed=_TYPES)
        self._static: dict = {}  # float input? -> the transform without argument inputs
        try:
            self.image_type = to_image_type(image_type)
        except ValueError:
            raise ArgumentError(
                f"{self.schema}: image_type={image_type!r} is not an image type"
            ) from None
        if self.image_type not in (DALIImageType.RGB, DALIImageType.BGR):
            raise ArgumentError(
                f"{self.schema}: image_type={self.image_type.name} is not supported; the "
                "input must be RGB or BGR"
            )

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        if lay and not lay.endswith("C"):
            raise ArgumentError(
                f"{self.schema}: expects images with channels last (HWC, FHWC, DHWC), got the "
                f"input layout {lay!r}"
            )
        return [lay]

    def _value(self, args: dict, name: str, default: float) -> float:
        v = args.get(name)
        if v is not None:
            return float(np.asarray(v).reshape(-1)[0])
        return getattr(self, name, default)

    def _transform(self, args: dict, in_dt: np.dtype) -> tuple[np.ndarray, float]:
        hue = self._value(args, "hue", 0.0)
        sat = self._value(args, "saturation", 1.0)
        val = self._value(args, "value", 1.0)
        bri = self._value(args, "brightness", 1.0)
        con = self._value(args, "contrast", 1.0)
        m = color_matrix(hue, sat, val, bri, con)
        half = np.float32(0.5 if in_dt.kind == "f" else 128.0)
        return m, float((half - half * np.float32(con)) * np.float32(bri))

    def _batch_transforms(self, args: dict, n: int, in_dt: np.dtype):
        """The (N, 3, 3) matrices (channel order applied) and (N,) offsets of a batch, with
        numpy over the batch (:func:`color_matrices`); without argument inputs, one
        transform worked out once. Values that are not numbers go sample by sample."""
        if not args:
            key = in_dt.kind == "f"
            t = self._static.get(key)
            if t is None:
                m, off = self._transform({}, in_dt)
                t = self._static[key] = (self._ordered(m)[None], np.array([[off]]))
            return np.broadcast_to(t[0], (n, 3, 3)), np.broadcast_to(t[1], (n, 3))
        vals = {}
        for name, default in (("hue", 0.0), ("saturation", 1.0), ("value", 1.0),
                              ("brightness", 1.0), ("contrast", 1.0)):  # fmt: skip
            if name in args:
                v = host_numbers(args[name], kinds="iuf")
                if v is not None and len(v) == n:  # (0-d samples: read at once)
                    vals[name] = v
                    continue
                a = _small.stack(args[name])
                if a is None or a.dtype.kind not in "iuf" or a.size < n:
                    return self._sample_transforms(args, n, in_dt)
                vals[name] = a.reshape(n, -1)[:, 0].astype(np.float64)
            else:
                vals[name] = np.full(n, getattr(self, name, default))
        m = color_matrices(*vals.values())
        f32 = np.float32
        half = f32(0.5 if in_dt.kind == "f" else 128.0)
        con, bri = vals["contrast"].astype(f32), vals["brightness"].astype(f32)
        offs = ((half - half * con) * bri).astype(np.float64)
        return self._ordered(m), np.repeat(offs, 3).reshape(n, 3)

    def _sample_transforms(self, args: dict, n: int, in_dt: np.dtype):
        mats, offs = np.zeros((n, 3, 3)), np.zeros((n, 3))
        for i in range(n):
            m, offs[i] = self._transform({k: v[i] for k, v in args.items()}, in_dt)
            mats[i] = m
        return self._ordered(mats), offs

    def _ordered(self, m: np.ndarray) -> np.ndarray:
        """Matrices (..., 3, 3) for the input's channel order (BGR: both axes reversed)."""
        return m[..., ::-1, ::-1] if self.image_type == DALIImageType.BGR else m

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        if x.ndim < 1 or x.shape[-1] != 3:
            raise ArgumentError(
                f"{self.schema}: expects 3-channel images with channels last (HWC), got shape "
                f"{list(x.shape)}"
            )
        if x.dtype not in _TYPES:
            raise ArgumentError(f"{self.schema}: input type {x.dtype} is not supported")
        m, offset = self._transform(args, x.dtype)
        return apply_color_matrix(
            x, m, offset, self.dtype or x.dtype, self.image_type == DALIImageType.BGR
        )

    def run_batch(self, inputs, args, params, stream):
        """GPU: one launch with a matrix per sample. Any sample with 3 channels last, as on the
        CPU: HWC as it is, the leading dimensions of FHWC, DHWC, ... folded into the rows (a
        per-sample matrix applies to every frame)."""
        s = as_samples(inputs[0])
        n = len(s)
        in_dt = np.dtype(s.dtype)
        if n and (s.shapes.shape[1] < 1 or not (s.shapes[:, -1] == 3).all()):
            bad = 0 if s.shapes.shape[1] < 1 else int(np.argmin(s.shapes[:, -1] == 3))
            e = ArgumentError(
                f"{self.schema}: expects 3-channel images with channels last (HWC), got shape "
                f"{[int(v) for v in s.shapes[bad]]}"
            )
            e.sample_index = bad
            raise e
        if in_dt not in _TYPES:
            raise ArgumentError(f"{self.schema}: input type {in_dt} is not supported")
        out_dt = self.dtype or in_dt
        if n == 0:
            return alloc_batch(np.zeros((0, 0), np.int64), out_dt, s.device_id)
        folded, shapes = fold_rows(s, 3)
        mats, offs = self._batch_transforms(args, n, in_dt)
        out = color_matrix_batch(folded, mats, offs, out_dtype=out_dt, stream=stream)
        return unfold_rows(out, shapes)


@register(legacy=("ColorTwist",))
class ColorTwist(_ColorBase):
    """Adjusts hue, saturation, contrast and brightness of RGB images (HWC) in one linear
    transform (see the module doc).

    Args:
        hue: hue rotation in degrees (default 0.0); per-sample argument input allowed.
        saturation: saturation multiplier, 0 gives grey (default 1.0); argument input allowed.
        contrast: contrast multiplier around the mid level (default 1.0); argument input
            allowed.
        brightness: brightness multiplier (default 1.0); argument input allowed.
        image_type: ``types.RGB`` (default) or ``BGR``.
        dtype: output type (default: the input's); integers round and saturate.

    Example:
        >>> with pipe:
        ...     out = fn.color_twist(images, hue=fn.random.uniform(range=(-20, 20)),
        ...                          saturation=fn.random.uniform(range=(0.5, 1.5)))
    """

    schema = "color_twist"
    arg_inputs = frozenset({"hue", "saturation", "contrast", "brightness"})

    def setup(
        self,
        *,
        hue=0.0,
        saturation=1.0,
        contrast=1.0,
        brightness=1.0,
        image_type=DALIImageType.RGB,
        dtype=None,
    ) -> None:
        self._setup(
            dtype,
            image_type,
            hue=hue,
            saturation=saturation,
            contrast=contrast,
            brightness=brightness,
        )


@register(legacy=("Hsv",))
class Hsv(_ColorBase):
    """Adjusts hue (additive, degrees), saturation and value (multiplicative) of RGB images,
    approximated as a linear transform through YIQ space like DALI's ``fn.hsv``.

    Args:
        hue: hue delta in degrees (default 0.0); per-sample argument input allowed.
        saturation: saturation multiplier (default 1.0); argument input allowed.
        value: value (brightness) multiplier (default 1.0); argument input allowed.
        dtype: output type (default: the input's).
    """

    schema = "hsv"
    arg_inputs = frozenset({"hue", "saturation", "value"})

    def setup(self, *, hue=0.0, saturation=1.0, value=1.0, dtype=None) -> None:
        self._setup(dtype, DALIImageType.RGB, hue=hue, saturation=saturation, value=value)


@register(legacy=("Hue",))
class Hue(_ColorBase):
    """Rotates the hue of RGB images by ``hue`` degrees (per-sample argument input allowed).

    Args:
        hue: degrees (default 0.0). image_type: RGB (default) or BGR. dtype: output type
            (default: the input's).
    """

    schema = "hue"
    arg_inputs = frozenset({"hue"})

    def setup(self, *, hue=0.0, image_type=DALIImageType.RGB, dtype=None) -> None:
        self._setup(dtype, image_type, hue=hue)


@register(legacy=("Saturation",))
class Saturation(_ColorBase):
    """Scales the saturation of RGB images (0: grey; per-sample argument input allowed).

    Args:
        saturation: multiplier (default 1.0). image_type: RGB (default) or BGR. dtype: output
            type (default: the input's).
    """

    schema = "saturation"
    arg_inputs = frozenset({"saturation"})

    def setup(self, *, saturation=1.0, image_type=DALIImageType.RGB, dtype=None) -> None:
        self._setup(dtype, image_type, saturation=saturation)
