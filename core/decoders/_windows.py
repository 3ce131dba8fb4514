"""The decode windows of ``decoders.image_crop`` and ``decoders.image_slice`` (DALI's CropAttr
and SliceAttr, as ``dali/operators/imgcodec/roi_image_decoder.h`` applies them to an image).

A window is resolved in two steps, so that the CPU and the mixed decoder share it and the
mixed decoder can use it on the header's size (ROI decode) or the decoded size (a view):

1. per sample, from the operator's arguments, argument inputs and positional inputs, a small
   float64 *spec* row (:meth:`CropSpec.spec`, :meth:`SliceSpec.spec`); every argument error
   that does not depend on the image is raised here;
2. per image, :class:`DecodeWindow` turns the spec and the image's (H, W) into ``(y, x, h, w)``
   and checks that the window lies inside the image (DALI's ``EnforceInRange``: a decoder
   neither pads nor trims).

Slice arithmetic follows DALI's ``NamedSliceAttr``/``PositionalSliceAttr`` to the float: a
relative named argument (``rel_start``, ``rel_end``, ``rel_shape``) is multiplied by the extent
in float32, ``rel_start`` + ``rel_shape`` are summed in double first, positional normalized
inputs are scaled in double; the anchor and the end are rounded half away from zero
(``llround``) and the shape is their difference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .._geometry.crop_args import CropArgs, crop_window
from ..errors import ArgumentError

# Per-axis spec of a slice: (start kind, start value, end kind, end value).
START_NONE, START_ABS, START_REL32, START_REL64 = 0, 1, 2, 3
(
    END_NONE,  # the extent
    END_ABS,  # an absolute end
    END_REL32,  # value * extent, in float32
    END_SHAPE,  # start + value
    END_SUM_REL64,  # value * extent in double (value: rel_start + rel_shape, or anchor + shape)
    END_SHAPE_REL32,  # start + value * extent (float32 product)
    END_SHAPE_REL64,  # start + value * extent (double product)
) = range(7)

_SLICE_TYPES = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32))


def llround(v: float) -> int:
    """C's ``llround``: to nearest, halves away from zero."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def _f32_mul(v: float, extent: int) -> float:
    return float(np.float32(v) * np.float32(extent))


class DecodeWindow:
    """Turns per-sample spec rows into windows; what ``MixedDecoder`` calls ``window``.

    Args:
        resolve: ``resolve(height, width, spec) -> (y, x, h, w)``, unchecked.
        who: the operator, for error messages.
    """

    def __init__(self, resolve, who: str):
        self._resolve = resolve
        self.who = who

    def window(self, height: int, width: int, spec: np.ndarray) -> tuple[int, int, int, int]:
        """``(y, x, h, w)`` of an image of ``height`` x ``width``.

        Raises:
            ArgumentError: the window leaves the image.
        """
        y, x, h, w = self._resolve(int(height), int(width), np.asarray(spec, np.float64))
        if y < 0 or x < 0 or y + h > height or x + w > width:
            raise ArgumentError(
                f"{self.who}: the cropping window [{y}..{y + h}, {x}..{x + w}] is not valid for "
                f"image dimensions [{height}, {width}]"
            )
        return y, x, h, w

    def windows(self, heights, widths, specs: np.ndarray) -> np.ndarray:
        """The windows of a batch: an (N, 4) int64 array of ``(y, x, h, w)``."""
        rows = [
            self.window(h, w, s)
            for h, w, s in zip(np.asarray(heights), np.asarray(widths), specs, strict=True)
        ]
        return np.asarray(rows, np.int64).reshape(-1, 4)


class CropSpec(CropArgs):
    """DALI's CropAttr for a decoder: a window of ``crop`` (or ``crop_h``/``crop_w``) at
    ``crop_pos_x``/``crop_pos_y``; none: the whole image. Spec row: (crop_h, crop_w, pos_y,
    pos_x), an extent <= 0 meaning the whole axis."""

    def spec(self, args: dict) -> np.ndarray:
        ext = self.crop_extents(args)
        pos = {}
        for letter, name in (("W", "crop_pos_x"), ("H", "crop_pos_y")):
            v = args.get(name)
            pos[letter] = self._pos[letter] if v is None else float(np.asarray(v).reshape(-1)[0])
            if not 0.0 <= pos[letter] <= 1.0:
                raise ArgumentError(
                    f"{self._crop_who}: {name}={pos[letter]} is out of range [0, 1]"
                )
        return np.array([ext.get("H", -1), ext.get("W", -1), pos["H"], pos["W"]], np.float64)

    def resolve(self, height: int, width: int, spec: np.ndarray) -> tuple[int, int, int, int]:
        ch, cw, py, px = spec.tolist()
        extents = {"H": int(ch), "W": int(cw)}
        (y, x), (h, w) = crop_window((height, width), "HW", extents, {"H": py, "W": px})
        return y, x, h, w


class SliceSpec:
    """DALI's SliceAttr for a decoder: named arguments (``start``/``rel_start`` with ``end``/
    ``rel_end``/``shape``/``rel_shape``) or the positional inputs anchor and shape, over the
    axes ``axes`` or ``axis_names`` (default ``"WH"``) of the (H, W) image.

    Spec row: for H then W, (start kind, start value, end kind, end value) (the module's
    ``START_*``/``END_*`` codes).
    """

    NAMED = ("start", "rel_start", "end", "rel_end", "shape", "rel_shape")

    def setup_slice(
        self,
        who: str,
        named: dict,
        axes,
        axis_names,
        normalized_anchor: bool,
        normalized_shape: bool,
    ) -> None:
        self._who = who
        if axes is not None and axis_names is not None:
            raise ArgumentError(f'{who}: "axes" and "axis_names" are mutually exclusive')
        if axes is not None:
            vals = np.atleast_1d(np.asarray(axes)).reshape(-1)
            if vals.dtype.kind not in "iu":
                raise ArgumentError(f"{who}: axes={axes!r} must be integers")
            for a in vals.tolist():
                if not -2 <= a < 2:
                    raise ArgumentError(
                        f"{who}: axes={list(vals.tolist())}: axis {a} is out of range for the "
                        "decoded image's (H, W) axes"
                    )
            self._axes = [a % 2 for a in vals.tolist()]
        else:
            names = "WH" if axis_names is None else str(axis_names)
            bad = [c for c in names if c not in "HW"]
            if bad or len(set(names)) != len(names):
                raise ArgumentError(
                    f"{who}: axis_names={names!r} must name the axes H and W of the decoded "
                    "image, each at most once"
                )
            self._axes = ["HW".index(c) for c in names]
        self._named = {k: v for k, v in named.items() if v is not None}
        self._check_exclusive(set(self._named))
        self.normalized_anchor = bool(normalized_anchor)
        self.normalized_shape = bool(normalized_shape)

    def _check_exclusive(self, given: set) -> None:
        if {"start", "rel_start"} <= given:
            raise ArgumentError(f'{self._who}: "start" and "rel_start" are mutually exclusive')
        ends = sorted(given & {"end", "rel_end", "shape", "rel_shape"})
        if len(ends) > 1:
            raise ArgumentError(
                f'{self._who}: "end", "rel_end", "shape" and "rel_shape" are mutually '
                f"exclusive; got {ends}"
            )

    def _values(self, name: str, v) -> list[float]:
        a = np.atleast_1d(np.asarray(v)).reshape(-1)
        if a.dtype.kind not in "iuf" or a.size != len(self._axes):
            raise ArgumentError(
                f"{self._who}: {name}={np.asarray(v).tolist()!r} must have one number per "
                f"sliced axis ({len(self._axes)})"
            )
        if name in ("start", "end", "shape"):
            if a.dtype.kind == "f" and not np.all(a == np.round(a)):
                raise ArgumentError(f"{self._who}: {name}={a.tolist()} must be integers")
            return [float(int(x)) for x in a.tolist()]
        return [float(x) for x in a.astype(np.float32).tolist()]  # DALI's ArgValue<float>

    def spec(self, args: dict, positional: Sequence) -> np.ndarray:
        """The spec row of one sample from its argument inputs ``args`` and positional
        inputs (anchor, shape)."""
        named = self._named  # checked by setup_slice
        if args:  # argument inputs add or replace some
            named = {**named, **{k: args[k] for k in self.NAMED if k in args}}
            self._check_exclusive(set(named))
        if named:
            if positional:
                raise ArgumentError(
                    f"{self._who}: named arguments start/end/shape are not compatible with "
                    "positional anchor and shape inputs"
                )
            axes = self._named_spec({k: self._values(k, v) for k, v in named.items()})
        elif len(positional) == 2:
            axes = self._positional_spec(*positional)
        else:
            raise ArgumentError(
                f"{self._who}: expected named slice arguments (e.g. start/end, start/shape) or "
                f"positional inputs (anchor, shape); got {1 + len(positional)} inputs"
            )
        row = [(START_NONE, 0.0, END_NONE, 0.0)] * 2
        for axis, entry in zip(self._axes, axes, strict=True):
            row[axis] = entry
        return np.array(row, np.float64).reshape(-1)

    def _named_spec(self, v: dict) -> list:
        out = []
        for i in range(len(self._axes)):
            if "start" in v:
                start = (START_ABS, v["start"][i])
            elif "rel_start" in v:
                start = (START_REL32, v["rel_start"][i])
            else:
                start = (START_NONE, 0.0)
            if "end" in v:
                end = (END_ABS, v["end"][i])
            elif "rel_end" in v:
                end = (END_REL32, v["rel_end"][i])
            elif "shape" in v:
                if v["shape"][i] < 0:
                    raise ArgumentError(
                        f"{self._who}: shape value out of range [0, 2^63-1]; got {v['shape'][i]}"
                    )
                end = (END_SHAPE, v["shape"][i])
            elif "rel_shape" in v:
                if v["rel_shape"][i] < 0:
                    raise ArgumentError(
                        f"{self._who}: negative shapes are not allowed; got rel_shape "
                        f"{v['rel_shape'][i]}"
                    )
                if "rel_start" in v:  # summed in double, then scaled once
                    end = (END_SUM_REL64, v["rel_start"][i] + v["rel_shape"][i])
                else:
                    end = (END_SHAPE_REL32, v["rel_shape"][i])
            else:
                end = (END_NONE, 0.0)
            out.append((*start, *end))
        return out

    def _positional_spec(self, anchor, shape) -> list:
        anchor, shape = np.asarray(anchor), np.asarray(shape)
        if anchor.dtype != shape.dtype:
            raise ArgumentError(
                f"{self._who}: anchor and shape should have the same type; got {anchor.dtype} "
                f"and {shape.dtype}"
            )
        if anchor.dtype not in _SLICE_TYPES:
            raise ArgumentError(
                f"{self._who}: unsupported type of anchor and shape: {anchor.dtype} (use int32, "
                "int64 or float32)"
            )
        if anchor.shape != shape.shape or anchor.ndim > 1:
            raise ArgumentError(
                f"{self._who}: anchor and shape must be 1-D (or scalars) of the same shape; got "
                f"{anchor.shape} and {shape.shape}"
            )
        if anchor.size != len(self._axes):
            raise ArgumentError(
                f"{self._who}: unexpected number of anchor/shape values {anchor.size} vs "
                f"{len(self._axes)} sliced axes"
            )
        is_float = anchor.dtype.kind == "f"
        norm_a = is_float and self.normalized_anchor
        norm_s = is_float and self.normalized_shape
        out = []
        for a, s in zip(anchor.reshape(-1).tolist(), shape.reshape(-1).tolist(), strict=True):
            a, s = float(a), float(s)
            if norm_a and norm_s:
                out.append((START_REL64, a, END_SUM_REL64, a + s))
            elif norm_a:
                out.append((START_REL64, a, END_SHAPE, s))
            elif norm_s:
                out.append((START_ABS, a, END_SHAPE_REL64, s))
            else:
                out.append((START_ABS, a, END_SHAPE, s))
        return out

    def resolve(self, height: int, width: int, spec: np.ndarray) -> tuple[int, int, int, int]:
        win = []
        values = spec.tolist()  # Python floats: ~1 us a sample against numpy scalars' ~10
        for extent, i in ((height, 0), (width, 4)):
            sk, sv, ek, ev = values[i : i + 4]
            if sk == START_REL64:
                start = sv * extent
            elif sk == START_ABS:
                start = sv
            elif sk == START_REL32:
                start = _f32_mul(sv, extent)
            else:
                start = 0.0
            if ek == END_NONE:
                end = float(extent)
            elif ek == END_ABS:
                end = ev
            elif ek == END_REL32:
                end = _f32_mul(ev, extent)
            elif ek == END_SHAPE:
                end = start + ev
            elif ek == END_SUM_REL64:
                end = ev * extent
            elif ek == END_SHAPE_REL32:
                end = start + _f32_mul(ev, extent)
            else:
                end = start + ev * extent
            if end < start:
                raise ArgumentError(
                    f"{self._who}: end coordinates can't be before start coordinates; got "
                    f"start={start}, end={end}"
                )
            a = llround(start)
            win.append((a, llround(end) - a))
        (y, h), (x, w) = win
        return y, x, h, w
