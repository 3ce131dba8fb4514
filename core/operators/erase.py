"""``fn.erase``: fills rectangular regions of tensors (DALI's ``Erase``).

Region arithmetic as DALI's ``erase_utils.h``: per listed axis, ``anchor`` (times the extent
when normalized) minus half the region when ``centered_anchor``, truncated toward zero; the end
is ``int(anchor + shape)``; the region is clipped to the tensor. Several regions are given by
concatenating their anchors (and shapes). Axes not listed are erased over their whole extent.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from .cast import convert_sat

__all__ = ["Erase", "erase_regions"]

_TYPES = tuple(
    np.dtype(t)
    for t in (
        np.uint8,
        np.int8,
        np.uint16,
        np.int16,
        np.uint32,
        np.int32,
        np.uint64,
        np.int64,
        np.float16,
        np.float32,
    )
)


def erase_regions(
    shape, axes, anchor, extent, norm_anchor: bool, norm_shape: bool, centered: bool
) -> list[tuple[tuple[int, int], ...]]:
    """The regions of one sample as per-axis (begin, end) pairs, clipped to ``shape``."""
    naxes = len(axes)
    anchor = np.asarray(anchor, np.float32).reshape(-1)
    extent = np.asarray(extent, np.float32).reshape(-1)
    if anchor.size == 0 and extent.size:
        anchor = np.zeros(extent.size, np.float32)
    if anchor.size != extent.size:
        raise ArgumentError(
            f"erase: anchor ({anchor.size} values) and shape ({extent.size} values) must have "
            "the same length"
        )
    if extent.size % naxes:
        raise ArgumentError(
            f"erase: {extent.size} anchor/shape values are not a whole number of regions of "
            f"{naxes} axes ({list(axes)})"
        )
    regions = []
    for r in range(extent.size // naxes):
        box = [(0, int(s)) for s in shape]
        for j, axis in enumerate(axes):
            size = np.float32(shape[axis])
            a = anchor[r * naxes + j] * size if norm_anchor else anchor[r * naxes + j]
            s = extent[r * naxes + j] * size if norm_shape else extent[r * naxes + j]
            if centered:
                a = np.float32(a - s / np.float32(2))
            begin = int(np.trunc(a))
            end = int(np.trunc(np.float32(a + s)))
            box[axis] = (min(max(begin, 0), int(shape[axis])), min(max(end, 0), int(shape[axis])))
        regions.append(tuple(box))
    return regions


@register(legacy=("Erase",))
class Erase(Operator):
    """Erases (fills with ``fill_value``) one or more regions of the input.

    The regions are given along ``axis_names`` (or ``axes``); without either, along every axis
    but the channels (``C``). Axes not listed are erased over their whole extent.

    Args:
        anchor: the start of each region, for each listed axis, regions concatenated (default:
            zeros); per-sample argument input allowed.
        shape: the extent of each region, likewise; argument input allowed.
        axis_names: the layout letters ``anchor``/``shape`` refer to (e.g. ``"HW"``); takes
            priority over ``axes``.
        axes: the axis indices ``anchor``/``shape`` refer to.
        fill_value: one value, or one per channel (the layout needs a ``C``) (default 0).
        normalized_anchor, normalized_shape: the values are fractions of the extents.
        normalized: both at once (exclusive with the two above).
        centered_anchor: the anchor is the centre of the region.

    Example:
        >>> with pipe:
        ...     out = fn.erase(images, anchor=[10, 20], shape=[50, 40], axis_names="HW",
        ...                    fill_value=(118, 185, 0))
    """

    schema = "erase"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"anchor", "shape"})

    def setup(
        self,
        *,
        anchor=(),
        shape=(),
        axes=None,
        axis_names=None,
        fill_value=0.0,
        normalized_anchor=None,
        normalized_shape=None,
        normalized=None,
        centered_anchor=False,
    ) -> None:
        self.anchor = self._vec("anchor", anchor)
        self.shape = self._vec("shape", shape)
        if normalized is not None and (
            normalized_anchor is not None or normalized_shape is not None
        ):
            raise ArgumentError(
                f"{self.schema}: normalized cannot be combined with normalized_anchor or "
                "normalized_shape"
            )
        if normalized is not None:
            normalized_anchor = normalized_shape = normalized
        self.norm_anchor = bool(normalized_anchor)
        self.norm_shape = bool(normalized_shape)
        self.centered = bool(centered_anchor)
        self.axis_names = None if axis_names is None else str(axis_names)
        self.axes = None
        if axes is not None and self.axis_names is None:
            self.axes = [int(a) for a in np.asarray(axes).reshape(-1)]
        self.fill = self._vec("fill_value", fill_value)
        if self.fill.size == 0:
            raise ArgumentError(f"{self.schema}: fill_value must not be empty")
        self._layout = ""

    def _vec(self, name: str, value) -> np.ndarray:
        try:
            return np.asarray(value, np.float32).reshape(-1)
        except (TypeError, ValueError):
            raise ArgumentError(f"{self.schema}: {name}={value!r} must be numbers") from None

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def sample_axes(self, ndim: int) -> list[int]:
        layout = self._layout
        if self.axis_names is not None:
            missing = [c for c in self.axis_names if c not in layout]
            if missing:
                raise ArgumentError(
                    f"{self.schema}: axis_names={self.axis_names!r} are not all in the input "
                    f"layout {layout!r}"
                )
            return [layout.index(c) for c in self.axis_names]
        if self.axes is not None:
            bad = [a for a in self.axes if not -ndim <= a < ndim]
            if bad:
                raise ArgumentError(f"{self.schema}: axes={self.axes} out of range for {ndim}-D")
            return [a % ndim for a in self.axes]
        axes = [d for d in range(ndim) if not (layout and layout[d] == "C")]
        if not axes:
            raise ArgumentError(f"{self.schema}: the input has no axis to erase along")
        return axes

    def channel_dim(self) -> int | None:
        return self._layout.index("C") if "C" in self._layout else None

    def fill_values(self, dtype, shape) -> np.ndarray:
        """The fill value per channel (one value when there is no channel axis), as ``dtype``."""
        cdim = self.channel_dim()
        if self.fill.size > 1:
            if cdim is None:
                raise ArgumentError(
                    f"{self.schema}: a multi-channel fill_value needs a 'C' axis in the input "
                    f"layout, got {self._layout!r}"
                )
            if self.fill.size != shape[cdim]:
                raise ArgumentError(
                    f"{self.schema}: fill_value has {self.fill.size} values but the input has "
                    f"{shape[cdim]} channels"
                )
        return convert_sat(self.fill, dtype)

    def sample_regions(self, args: dict, shape) -> list:
        anchor = self._vec("anchor", args["anchor"]) if "anchor" in args else self.anchor
        extent = self._vec("shape", args["shape"]) if "shape" in args else self.shape
        axes = self.sample_axes(len(shape))
        return erase_regions(
            shape, axes, anchor, extent, self.norm_anchor, self.norm_shape, self.centered
        )

    def _batch_boxes(self, shapes: np.ndarray, args: dict):
        """``erase_regions`` of every sample at once, as (begins, ends) int64 (N, regions,
        ndim) arrays, when every sample has as many anchor and shape values (a multiple of the
        axes) and they are finite: the same float32 arithmetic, elementwise. None otherwise
        (the per-sample path then computes the regions, or raises its errors)."""
        n, ndim = shapes.shape
        anchors = self._stacked("anchor", args, n)
        extents = self._stacked("shape", args, n)
        if anchors is None or extents is None:
            return None
        if anchors.shape[1] == 0 and extents.shape[1]:
            anchors = np.zeros_like(extents)
        axes = self.sample_axes(ndim)
        naxes = len(axes)
        if anchors.shape != extents.shape or extents.shape[1] % naxes:
            return None
        nreg = extents.shape[1] // naxes
        size = shapes[:, axes].astype(np.float32)[:, None, :]  # (N, 1, naxes)
        a = anchors.reshape(n, nreg, naxes)
        e = extents.reshape(n, nreg, naxes)
        if self.norm_anchor:
            a = a * size
        if self.norm_shape:
            e = e * size
        if self.centered:
            a = a - e / np.float32(2)
        first, last = np.trunc(a), np.trunc(a + e)
        if not (np.isfinite(first).all() and np.isfinite(last).all()):
            return None
        if max(np.abs(first).max(initial=0), np.abs(last).max(initial=0)) >= 2.0**62:
            return None
        begins = np.zeros((n, nreg, ndim), np.int64)
        ends = np.broadcast_to(shapes[:, None, :], (n, nreg, ndim)).copy()
        for j, axis in enumerate(axes):  # in order: a repeated axis takes its last values
            hi = shapes[:, None, axis]
            begins[:, :, axis] = np.minimum(np.maximum(first[:, :, j].astype(np.int64), 0), hi)
            ends[:, :, axis] = np.minimum(np.maximum(last[:, :, j].astype(np.int64), 0), hi)
        return begins, ends

    def _stacked(self, name: str, args: dict, n: int):
        """``anchor``/``shape`` as float32 (N, values), or None when samples differ in count."""
        if name not in args:
            value = self.anchor if name == "anchor" else self.shape
            return np.broadcast_to(value, (n, value.size))
        rows = [self._vec(name, v) for v in args[name]]
        if len({r.size for r in rows}) != 1:
            return None
        return np.stack(rows)

    def _check(self, dtype, ndim) -> None:
        if np.dtype(dtype) not in _TYPES:
            raise ArgumentError(f"{self.schema}: input type {np.dtype(dtype)} is not supported")
        if not 1 <= ndim <= 5:
            raise ArgumentError(f"{self.schema}: {ndim}-D input; 1 to 5 dimensions supported")
        if self._layout and len(self._layout) != ndim:
            raise ArgumentError(
                f"{self.schema}: a {ndim}-D sample does not match the layout {self._layout!r}"
            )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check(x.dtype, x.ndim)
        regions = self.sample_regions(args, x.shape)
        if not regions:
            return x
        fill = self.fill_values(x.dtype, x.shape)
        cdim = self.channel_dim()
        out = x.copy()
        for box in regions:
            index = tuple(slice(b, e) for b, e in box)
            if fill.size == 1:
                out[index] = fill[0]
            else:  # per channel: the fill values of the region's channels, broadcast
                per = [1] * x.ndim
                per[cdim] = fill.size
                out[index] = fill.reshape(per)[
                    tuple(index[d] if d == cdim else slice(None) for d in range(x.ndim))
                ]
        return out

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.erase import erase_batch

        s = inputs[0]
        n = len(s)
        ndim = s.shapes.shape[1] if n else 1
        self._check(s.dtype, ndim)
        boxes = self._batch_boxes(s.shapes, args) if n and self.fill.size == 1 else None
        if boxes is not None:  # the same number of regions in every sample, fill not per channel
            fill = self.fill_values(s.dtype, s.shapes[0].tolist())
            return erase_batch(s, boxes, [fill] * n, self.channel_dim(), stream=stream)
        regions, fills = [], []
        for i in range(n):
            shape = [int(v) for v in s.shapes[i]]
            regions.append(self.sample_regions({k: v[i] for k, v in args.items()}, shape))
            fills.append(self.fill_values(s.dtype, shape))
        return erase_batch(s, regions, fills, self.channel_dim(), stream=stream)
