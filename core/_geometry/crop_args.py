"""Crop windows: DALI's crop arguments (CropAttr plus OutOfBoundsAttr) checked and resolved
per sample, the out-of-bounds policies, and the window arithmetic. Pure geometry, shared by
``operators/crop.py``, ``crop_mirror_normalize`` and the window decoders
(``decoders/_windows.py``), which sit above it."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from numbers import Real

import numpy as np

from .._dtype import convert_sat
from ..errors import ArgumentError


class OutOfBoundsPolicy(enum.Enum):
    """What to do with a crop window that leaves the input."""

    ERROR = "error"
    PAD = "pad"
    TRIM_TO_SHAPE = "trim_to_shape"


def to_out_of_bounds_policy(value, who: str) -> OutOfBoundsPolicy:
    """Accept an :class:`OutOfBoundsPolicy` or its name (``"pad"``)."""
    if isinstance(value, OutOfBoundsPolicy):
        return value
    try:
        return OutOfBoundsPolicy(str(value).lower())
    except ValueError:
        raise ArgumentError(
            f"{who}: out_of_bounds_policy={value!r} is not one of 'error', 'pad', 'trim_to_shape'"
        ) from None


_DEFAULT_LAYOUTS = {2: "HW", 3: "HWC", 4: "FHWC"}


def default_layout(layout: str, ndim: int, who: str) -> str:
    """``layout`` checked against ``ndim``; an unknown layout ("") is guessed from ``ndim``."""
    if not layout:
        if ndim not in _DEFAULT_LAYOUTS:
            raise ArgumentError(
                f"{who}: the input has {ndim} dimensions and no layout; give it a layout "
                "(HWC, CHW, DHWC, FHWC, ...)"
            )
        return _DEFAULT_LAYOUTS[ndim]
    if len(layout) != ndim:
        raise ArgumentError(f"{who}: the input has {ndim} dimensions but its layout is {layout!r}")
    return layout


def crop_anchor(pos: float, in_extent: int, crop_extent: int) -> int:
    """DALI's ``roundf(pos * (in_extent - crop_extent))``: float32, halves away from zero."""
    v = float(np.float32(pos) * np.float32(in_extent - crop_extent))
    return int(np.copysign(np.floor(abs(v) + 0.5), v))


def crop_window(
    in_shape: Sequence[int],
    layout: str,
    extents: dict[str, int],
    positions: dict[str, float],
    who: str = "crop",
) -> tuple[list[int], list[int]]:
    """The crop window over every axis of a sample.

    Args:
        in_shape: the sample's shape.
        layout: its layout (one letter per axis).
        extents: the requested extent per axis letter (``"H"``, ``"W"``, ``"D"``); an extent
            <= 0 or a letter missing from the layout keeps the whole axis.
        positions: the normalized position per axis letter (default 0.5).
        who: the operator name for error messages.

    Returns:
        ``(anchor, shape)``, one entry per axis; not yet checked against the input bounds.

    Raises:
        ArgumentError: when a position is outside [0, 1].
    """
    anchor = [0] * len(in_shape)
    shape = [int(s) for s in in_shape]
    for letter, ext in extents.items():
        axis = layout.find(letter)
        if letter == "D" and axis < 0:
            axis = layout.find("F")  # DALI: crop_d crops the frames of a sequence
        if axis < 0 or ext is None or int(ext) <= 0:
            continue
        pos = float(positions.get(letter, 0.5))
        if not 0.0 <= pos <= 1.0:
            name = {"W": "crop_pos_x", "H": "crop_pos_y", "D": "crop_pos_z"}[letter]
            raise ArgumentError(f"{who}: {name}={pos} is out of range [0, 1]")
        shape[axis] = int(ext)
        anchor[axis] = crop_anchor(pos, in_shape[axis], shape[axis])
    return anchor, shape


def apply_out_of_bounds_policy(
    policy: OutOfBoundsPolicy,
    in_shape: Sequence[int],
    anchor: list[int],
    shape: list[int],
    who: str = "crop",
) -> tuple[list[int], list[int]]:
    """Check (ERROR), keep (PAD) or trim (TRIM_TO_SHAPE) a window that leaves the input."""
    if policy is OutOfBoundsPolicy.PAD:
        return anchor, shape
    out_of_bounds = any(a < 0 or a + s > n for a, s, n in zip(anchor, shape, in_shape, strict=True))
    if not out_of_bounds:
        return anchor, shape
    if policy is OutOfBoundsPolicy.ERROR:
        raise ArgumentError(
            f"{who}: the crop window (anchor {list(anchor)}, shape {list(shape)}) does not fit "
            f"the input of shape {list(in_shape)} with out_of_bounds_policy='error'; use "
            "'pad' or 'trim_to_shape', or a smaller crop"
        )
    new_anchor, new_shape = [], []
    for a, s, n in zip(anchor, shape, in_shape, strict=True):
        lo = min(max(a, 0), n)
        hi = min(max(a + s, 0), n)
        new_anchor.append(lo)
        new_shape.append(hi - lo)
    return new_anchor, new_shape


def pad_copy_extents(anchor: int, in_extent: int, out_extent: int) -> tuple[int, int, int]:
    """``(pad_before, copied, pad_after)`` along one axis for a window at ``anchor``."""
    pad_before = min(max(-anchor, 0), out_extent)
    start = max(anchor, 0)
    end = min(anchor + out_extent, in_extent)
    copied = max(end - start, 0)
    return pad_before, copied, out_extent - pad_before - copied


def window_slices(
    in_shape: Sequence[int], anchor: Sequence[int], shape: Sequence[int]
) -> tuple[tuple[slice, ...], tuple[slice, ...], bool]:
    """``(src, dst, padded)``: slices of the input that lie in the window, where they go in
    the window, and whether the window has any padding."""
    src, dst, padded = [], [], False
    for a, s, n in zip(anchor, shape, in_shape, strict=True):
        before, copied, after = pad_copy_extents(a, n, s)
        padded |= before > 0 or after > 0
        start = max(a, 0)
        src.append(slice(start, start + copied))
        dst.append(slice(before, before + copied))
    return tuple(src), tuple(dst), padded


def fill_array(fill_values: Sequence[float], nchannels: int | None, dtype, who: str) -> np.ndarray:
    """The fill value(s) as an array: a scalar, or one per channel (converted to ``dtype``)."""
    vals = np.asarray(fill_values, dtype=np.float64).reshape(-1)
    if vals.size == 0:
        vals = np.zeros(1)
    if vals.size > 1:
        if nchannels is None:
            raise ArgumentError(
                f"{who}: fill_values={list(fill_values)} has several values but the input has "
                "no channel axis"
            )
        if vals.size != nchannels:
            raise ArgumentError(
                f"{who}: fill_values={list(fill_values)} must have 1 value or one per channel "
                f"({nchannels})"
            )
    return convert_sat(vals, dtype)


class CropArgs:
    """The crop arguments shared by ``crop`` and ``crop_mirror_normalize`` (DALI's CropAttr
    plus OutOfBoundsAttr): checked at build time, resolved per sample."""

    CROP_ARG_INPUTS = frozenset(
        {"crop", "crop_h", "crop_w", "crop_d", "crop_pos_x", "crop_pos_y", "crop_pos_z"}
    )

    def setup_crop(
        self,
        who: str,
        crop,
        crop_h,
        crop_w,
        crop_d,
        crop_pos_x,
        crop_pos_y,
        crop_pos_z,
        out_of_bounds_policy,
        fill_values,
    ) -> None:
        if crop is not None and any(v is not None for v in (crop_h, crop_w, crop_d)):
            raise ArgumentError(
                f"{who}: crop={crop!r} cannot be combined with crop_h, crop_w or crop_d"
            )
        self._crop_who = who
        self._static_windows_memo: dict = {}  # static_windows: (shapes, layout) -> windows
        self._crop = None if crop is None else self._crop_tuple(crop, who)
        self._crop_hwd = {"H": crop_h, "W": crop_w, "D": crop_d}
        for name, v in (("crop_h", crop_h), ("crop_w", crop_w), ("crop_d", crop_d)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, Real)):
                raise ArgumentError(f"{who}: {name}={v!r} must be a number")
        self._pos = {"W": crop_pos_x, "H": crop_pos_y, "D": crop_pos_z}
        for name, v in (
            ("crop_pos_x", crop_pos_x),
            ("crop_pos_y", crop_pos_y),
            ("crop_pos_z", crop_pos_z),
        ):
            if not np.isscalar(v) or not 0.0 <= float(v) <= 1.0:
                raise ArgumentError(f"{who}: {name}={v!r} must be a number in [0, 1]")
        self.out_of_bounds_policy = to_out_of_bounds_policy(out_of_bounds_policy, who)
        fv = np.atleast_1d(np.asarray(fill_values, dtype=np.float64))
        if fv.ndim != 1 or fv.size == 0:
            raise ArgumentError(f"{who}: fill_values={fill_values!r} must be a number or a list")
        self.fill_values = [float(v) for v in fv]
        self._layout = ""

    @staticmethod
    def _crop_tuple(crop, who: str) -> tuple[int, ...]:
        vals = np.atleast_1d(np.asarray(crop, dtype=np.float64)).reshape(-1)
        if vals.size not in (2, 3):
            raise ArgumentError(f"{who}: crop={crop!r} must have 2 (H, W) or 3 (D, H, W) elements")
        return tuple(int(v) for v in vals)

    def has_crop(self, args: dict) -> bool:
        return (
            self._crop is not None
            or self._crop_hwd["H"] is not None
            or any(k in args for k in ("crop", "crop_h", "crop_w", "crop_d"))
        )

    def crop_extents(self, args: dict) -> dict[str, int]:
        """Requested extent per axis letter for one sample (static or argument input)."""
        crop = args.get("crop")
        crop = self._crop if crop is None else self._crop_tuple(crop, self._crop_who)
        if crop is not None and any(
            args.get(name, self._crop_hwd[letter]) is not None
            for letter, name in (("H", "crop_h"), ("W", "crop_w"), ("D", "crop_d"))
        ):
            raise ArgumentError(
                f"{self._crop_who}: crop={list(crop)} cannot be combined with crop_h, crop_w or "
                "crop_d"
            )
        if crop is not None:
            return dict(zip("DHW"[3 - len(crop) :], crop, strict=True))
        ext = {}
        for letter, name in (("H", "crop_h"), ("W", "crop_w"), ("D", "crop_d")):
            v = args.get(name, self._crop_hwd[letter])
            if v is not None:
                ext[letter] = int(float(np.asarray(v).reshape(-1)[0]))
        # Checked here, not in setup: an argument given as a DataNode never reaches setup.
        if ("H" in ext) != ("W" in ext):
            raise ArgumentError(f"{self._crop_who}: crop_h and crop_w must be given together")
        if "D" in ext and "H" not in ext:
            raise ArgumentError(f"{self._crop_who}: crop_d needs crop_h and crop_w as well")
        return ext

    def static_windows(self, shapes: np.ndarray, layout: str) -> np.ndarray:
        """``sample_window(shape, layout, {})`` of every row of ``shapes`` (n, ndim) at once, as
        an int64 array (n, 2, ndim) of (anchor, shape): the same float32 anchors and bounds
        policy, elementwise (``tests/core/test_crop_windows_batch.py``). After a
        ``resize_shorter`` nearly every sample of a batch has its own shape.

        Memoised for the last few batches of shapes (a copy is returned): the GPU stage asks
        once per batch, mostly for the same shapes (~40 us of numpy a batch otherwise)."""
        shapes = np.asarray(shapes, np.int64)
        key = (shapes.tobytes(), shapes.shape, layout)
        memo = self.__dict__.setdefault("_static_windows_memo", {})
        hit = memo.get(key)
        if hit is None:
            hit = self._static_windows(shapes, layout)
            if len(memo) >= 8:
                memo.clear()
            memo[key] = hit
        return hit.copy()

    def _static_windows(self, shapes: np.ndarray, layout: str) -> np.ndarray:
        wins = np.zeros((len(shapes), 2, shapes.shape[1]), np.int64)
        if not len(shapes):
            return wins
        self.sample_window(tuple(int(v) for v in shapes[0]), layout, {})  # argument errors
        anchor, shape = wins[:, 0], wins[:, 1]
        shape[:] = shapes
        for letter, ext in self.crop_extents({}).items():
            axis = layout.find(letter)
            if letter == "D" and axis < 0:
                axis = layout.find("F")
            if axis < 0 or ext is None or int(ext) <= 0:
                continue
            shape[:, axis] = int(ext)
            v = np.float32(self._pos[letter]) * (shapes[:, axis] - int(ext)).astype(np.float32)
            v = v.astype(np.float64)
            anchor[:, axis] = np.copysign(np.floor(np.abs(v) + 0.5), v).astype(np.int64)
        if self.out_of_bounds_policy is OutOfBoundsPolicy.PAD:
            return wins
        outside = ((anchor < 0) | (anchor + shape > shapes)).any(1)
        if outside.any() and self.out_of_bounds_policy is OutOfBoundsPolicy.ERROR:
            i = int(np.flatnonzero(outside)[0])
            self.sample_window(tuple(int(v) for v in shapes[i]), layout, {})  # raises
        lo = np.clip(anchor, 0, shapes)  # TRIM_TO_SHAPE (a window inside is unchanged)
        hi = np.clip(anchor + shape, 0, shapes)
        anchor[:], shape[:] = lo, hi - lo
        return wins

    def sample_window(
        self, in_shape: Sequence[int], layout: str, args: dict
    ) -> tuple[list[int], list[int]]:
        """The window of one sample, with the out-of-bounds policy applied."""
        positions = {}
        for letter, name in (("W", "crop_pos_x"), ("H", "crop_pos_y"), ("D", "crop_pos_z")):
            v = args.get(name)
            positions[letter] = (
                self._pos[letter] if v is None else float(np.asarray(v).reshape(-1)[0])
            )
        extents = self.crop_extents(args)
        if "H" not in layout or "W" not in layout:
            raise ArgumentError(
                f"{self._crop_who}: the layout {layout!r} has no H and W axes to crop"
            )
        anchor, shape = crop_window(in_shape, layout, extents, positions, self._crop_who)
        return apply_out_of_bounds_policy(
            self.out_of_bounds_policy, in_shape, anchor, shape, self._crop_who
        )
