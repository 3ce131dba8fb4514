"""``fn.filter`` (and ``fn.experimental.filter``): correlate images, videos or volumes with a
per-sample filter (DALI's ``experimental__Filter``).

``out[p] = sum_k filter[k] * in[p - anchor + k]`` over the spatial axes (a correlation: the
filter is not flipped), accumulated in float32 and converted to the output type with rounding
and saturation. Positions outside the sample follow ``border``: ``reflect_101``
(``dcb|abcd|cba``, the default), ``reflect_1001`` (``cba|abc|cba``), ``wrap``, ``clamp`` or
``constant`` (the third input, ``fill_value``, 0 when absent). ``mode="valid"`` keeps only the
positions where the whole filter lies inside the sample (the spatial extents shrink by
``filter_extent - 1``; ``anchor`` and ``border`` do not matter then).

Layouts: leading ``F``/``C`` axes (frames, channel planes), then the spatial axes (two, or
three for volumes), then an optional trailing ``C``; without a layout every axis is spatial
(2-D or 3-D). A video may take one filter per frame (a filter with a leading frame axis) and
one fill value per frame.

The CPU side is DALI's: ``cv2.filter2D`` per plane, with the same border handling (2-D only;
uint8, uint16, int16, float32). The GPU side (``kernels/filter.cu``) computes every output
element of the batch in one launch, 2-D and 3-D, also for int8 and float16; it rounds ties to
even as OpenCV does.
"""

from __future__ import annotations

import numpy as np

from .._dtype import parse_dtype
from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import as_samples, uniform_rows
from ..kernels.filter import filter_batch

__all__ = ["BORDERS", "Filter", "ExperimentalFilter", "filter_layout", "resolve_anchor"]

BORDERS = ("reflect_101", "reflect_1001", "wrap", "clamp", "constant")
CPU_TYPES = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.int16, np.float32))
GPU_TYPES = tuple(
    np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.float16, np.float32)
)


def filter_layout(who: str, layout: str, ndim: int) -> tuple[int, int, bool]:
    """(leading frame/channel axes, spatial axes, trailing channels?) of a sample, as DALI's
    ``setup_input_desc``.

    Raises:
        ArgumentError: a layout the filter does not take (frames not outermost, too many
            leading axes, spatial axes other than 2 or 3, a rank that does not match).
    """
    if not layout:
        if ndim not in (2, 3):
            raise ArgumentError(
                f"{who}: got input with {ndim} dimensions. However, only 2D and 3D convolutions "
                "are supported. If the input has non-spatial dimensions, such as channels or "
                "frames (for video sequences), please make sure the input batch has a proper "
                "layout set."
            )
        return 0, ndim, False
    if "F" in layout and layout.index("F") != 0:
        raise ArgumentError(
            f"{who}: when the input is video-like (i.e. contains frames), the frames must be an "
            f"outermost dimension. However, got input with `{layout}` layout."
        )
    pos = 0
    while pos < len(layout) and layout[pos] in "CF":
        pos += 1
    seq = pos
    while pos < len(layout) and layout[pos] not in "CF":
        pos += 1
    axes = pos - seq
    channels = layout[-1] == "C"
    if seq + axes + channels != ndim or len(layout) != ndim or seq > 2 or axes not in (2, 3):
        raise ArgumentError(
            f"{who}: Filter operator encountered input with unsupported layout: `{layout}`."
        )
    return seq, axes, channels


def resolve_anchor(who: str, anchor, filter_shape, sample_idx: int) -> tuple[int, ...]:
    """The anchor of each spatial axis: ``-1`` means the middle (``extent // 2``).

    Raises:
        ArgumentError: an anchor outside the filter, or a count other than 1 or one per axis.
    """
    a = np.asarray(anchor, np.int64).reshape(-1)
    axes = len(filter_shape)
    if a.size == 1:
        a = np.repeat(a, axes)
    if a.size != axes:
        raise ArgumentError(
            f"{who}: anchor={a.tolist()} must have 1 or {axes} values (one per spatial axis)"
        )
    for v, ext in zip(a, filter_shape, strict=True):
        if not -1 <= v < ext:
            raise ArgumentError(
                f"{who}: Anchor must lie within the filter. Got anchor {tuple(a.tolist())} with a "
                f"filter of shape {tuple(filter_shape)} for sample of idx {sample_idx}."
            )
    return tuple(int(ext // 2 if v < 0 else v) for v, ext in zip(a, filter_shape, strict=True))


@register
class Filter(Operator):
    """Correlates each sample with its filter (the second input).

    Args:
        anchor: the filter position over the output point, one value per spatial axis (or -1:
            the middle of the filter); per-sample argument input allowed. Ignored with
            ``mode="valid"``.
        border: ``"reflect_101"`` (default), ``"reflect_1001"``, ``"wrap"``, ``"clamp"`` or
            ``"constant"`` (padding with the third input, 0 when it is absent).
        mode: ``"same"`` (default: the output has the input's shape) or ``"valid"``.
        dtype: the output type: the input's (default) or FLOAT.

    Example:
        >>> kernel = types.Constant(np.full((3, 3), 1 / 9, np.float32))
        >>> with pipe:
        ...     blurred = fn.filter(images, kernel)
    """

    schema = "filter"
    devices = ("cpu", "gpu")
    num_inputs = (2, 3)
    cpu_inputs = (1, 2)
    arg_inputs = frozenset({"anchor"})

    def setup(self, *, anchor=(-1,), border: str = "reflect_101", mode: str = "same", dtype=None):
        who = self.schema
        if border not in BORDERS:
            raise ArgumentError(f"{who}: Unknown ``border_type`` was provided: ``{border}``.")
        if not isinstance(mode, str) or mode.lower() not in ("same", "valid"):
            raise ArgumentError(
                f"{who}: Unknown ``mode`` was provided: ``{mode}``. Supported modes are "
                "``same`` and ``valid``."
            )
        self.anchor = np.asarray(anchor, np.int64).reshape(-1)
        if self.anchor.size not in (1, 2, 3):
            raise ArgumentError(f"{who}: anchor={self.anchor.tolist()} must have 1, 2 or 3 values")
        self.border = border
        self.valid = mode.lower() == "valid"
        self.dtype = parse_dtype(dtype, who)
        self._layout = ""

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    # --- shared checks ------------------------------------------------------------------------
    def out_dtype(self, in_dtype, types) -> np.dtype:
        in_dtype = np.dtype(in_dtype)
        side = "CPU" if types is CPU_TYPES else "GPU"
        if in_dtype not in types:
            raise ArgumentError(
                f"{self.schema}: Filter {side} does not support input type {in_dtype}."
            )
        out = self.dtype or in_dtype
        if out not in (in_dtype, np.dtype(np.float32)):
            raise ArgumentError(
                f"{self.schema}: Output data type must be same as input, FLOAT or skipped "
                f"(defaults to input type); got dtype={out}"
            )
        return out

    def sample_plan(self, shape, filter_shape, fill_size: int | None, idx: int) -> dict:
        """What one sample needs: layout split, per-frame filters/fill, the output shape."""
        who = self.schema
        seq, axes, channels = filter_layout(who, self._layout, len(shape))
        filter_shape = tuple(int(v) for v in filter_shape)
        frames = int(shape[0]) if self._layout[:1] == "F" else 1
        per_frame = False
        if len(filter_shape) == axes + 1 and self._layout[:1] == "F":
            if filter_shape[0] != frames:
                raise ArgumentError(
                    f"{who}: sample {idx} has {frames} frames but {filter_shape[0]} per-frame "
                    "filters"
                )
            per_frame, filter_shape = True, filter_shape[1:]
        elif len(filter_shape) != axes:
            raise ArgumentError(
                f"{who}: Filter dimensionality must match the number of spatial dimensions in "
                f"the input samples. Got {axes} spatial dimensions but the filter is "
                f"{len(filter_shape)} dimensional."
            )
        if any(v <= 0 for v in filter_shape):
            raise ArgumentError(
                f"{who}: Filter of volume zero is not supported, got zero-volume filter for "
                f"sample of idx {idx}."
            )
        if fill_size is not None and fill_size not in (1, frames):
            raise ArgumentError(
                f"{who}: Padding values must be scalars, got {fill_size} elements for a sample "
                f"of idx {idx}."
            )
        out_shape = list(int(v) for v in shape)
        if self.valid:
            for a, ext in enumerate(filter_shape):
                out_shape[seq + a] -= ext - 1
                if out_shape[seq + a] <= 0:
                    raise ArgumentError(
                        f"{who}: Filter for sample of idx {idx} is bigger than the sample. This "
                        "is not allowed if ``mode`` is set to ``valid``."
                    )
        planes_per_frame = int(np.prod(shape[1:seq])) if frames > 1 or seq else 1
        return {
            "seq": seq,
            "axes": axes,
            "channels": channels,
            "filter_shape": filter_shape,
            "per_frame": per_frame,
            "frames": frames,
            "planes_per_frame": max(1, planes_per_frame),
            "out_shape": tuple(out_shape),
        }

    def _check_fill(self, fill_dtype, in_dtype) -> None:
        if np.dtype(fill_dtype) != np.dtype(in_dtype):
            raise ArgumentError(
                f"{self.schema}: The padding scalars (third positional argument) must be of the "
                f"same type as the input samples. Got {np.dtype(fill_dtype)} for pad values while "
                f"the input samples are of type {np.dtype(in_dtype)}."
            )

    @staticmethod
    def _check_filter_type(dtype) -> None:
        if np.dtype(dtype) != np.float32:
            raise ArgumentError(f"filter: Unsupported filter type: {np.dtype(dtype)}.")

    # --- CPU --------------------------------------------------------------------------------
    def run_sample(self, inputs, args, param):
        x, flt = inputs[0], np.asarray(inputs[1])
        fill = np.asarray(inputs[2]).reshape(-1) if len(inputs) > 2 else None
        out_dtype = self.out_dtype(x.dtype, CPU_TYPES)
        self._check_filter_type(flt.dtype)
        if fill is not None:
            self._check_fill(fill.dtype, x.dtype)
        plan = self.sample_plan(x.shape, flt.shape, None if fill is None else fill.size, 0)
        if plan["axes"] != 2:
            hint = ""
            if plan["axes"] == 3:
                hint = (
                    " If you are processing images with channels, please make sure to mark the "
                    "layout accordingly (`HWC` or `CHW`)."
                )
            raise ArgumentError(
                f"{self.schema}: Unsupported input data dimensionality. Got input with "
                f"{plan['axes']} spatial dimensions. CPU filter operator supports only "
                f"2-dimensional convolutions.{hint}"
            )
        anchor = resolve_anchor(
            self.schema, args.get("anchor", self.anchor), plan["filter_shape"], 0
        )
        seq = plan["seq"]
        planes = x.reshape((-1, *x.shape[seq:]))
        out = np.empty((planes.shape[0], *plan["out_shape"][seq:]), out_dtype)
        filters = flt.reshape((-1, *plan["filter_shape"]))
        for p in range(planes.shape[0]):
            frame = p // plan["planes_per_frame"]
            kernel = filters[frame if plan["per_frame"] else 0]
            value = 0 if fill is None else fill[frame if fill.size > 1 else 0]
            out[p] = self._filter_plane(planes[p], kernel, anchor, value, out_dtype)
        return out.reshape(plan["out_shape"])

    def _filter_plane(self, img, kernel, anchor, fill, out_dtype) -> np.ndarray:
        import cv2

        ay, ax = anchor
        fh, fw = kernel.shape
        depth = -1 if out_dtype == img.dtype else cv2.CV_32F
        kernel = np.ascontiguousarray(kernel, np.float32)
        img = np.ascontiguousarray(img)
        h, w = img.shape[:2]
        simple = {
            "reflect_101": cv2.BORDER_REFLECT_101,
            "reflect_1001": cv2.BORDER_REFLECT,
            "clamp": cv2.BORDER_REPLICATE,
        }
        if self.valid:  # every kept position lies inside: the border does not matter there
            full = cv2.filter2D(img, depth, kernel, anchor=(ax, ay))
            res = full[ay : ay + h - fh + 1, ax : ax + w - fw + 1]
            h, w = h - fh + 1, w - fw + 1
        elif self.border in simple or (self.border == "constant" and fill == 0):
            border = simple.get(self.border, cv2.BORDER_CONSTANT)
            res = cv2.filter2D(img, depth, kernel, anchor=(ax, ay), borderType=border)
        else:  # wrap, or a nonzero fill: pad, filter, keep the middle (as DALI does)
            top, bottom, left, right = ay, fh - ay - 1, ax, fw - ax - 1
            pad = ((top, bottom), (left, right)) + ((0, 0),) * (img.ndim - 2)
            if self.border == "wrap":
                padded = np.pad(img, pad, mode="wrap")
            else:
                padded = np.pad(img, pad, constant_values=fill)
            full = cv2.filter2D(padded, depth, kernel, anchor=(ax, ay))
            res = full[top : top + h, left : left + w]
        return res.reshape((h, w, *img.shape[2:]))

    # --- GPU --------------------------------------------------------------------------------
    def _uniform_batch(self, s, f_shapes, fill_sizes, args) -> bool:
        """Whether every sample has the first one's shape, filter shape and fill size (and
        the anchor is not per sample): then one :meth:`sample_plan` serves the batch."""
        return (
            "anchor" not in args
            and uniform_rows(s.shapes)
            and _all_equal(f_shapes)
            and (fill_sizes is None or _all_equal(fill_sizes))
        )

    def run_batch(self, inputs, args, params, stream):
        s = as_samples(inputs[0])
        out_dtype = self.out_dtype(s.dtype, GPU_TYPES)
        filters = inputs[1]
        fills = inputs[2] if len(inputs) > 2 else None
        n = len(s)
        f_shapes = _shapes(filters)
        f_dtype = _dtype(filters)
        if n:
            self._check_filter_type(f_dtype)
        fill_sizes = None
        if fills is not None:
            fill_sizes = [int(np.prod(shp)) for shp in _shapes(fills)]
            if n:
                self._check_fill(_dtype(fills), s.dtype)
        plans, anchors = [], []
        if n and self._uniform_batch(s, f_shapes, fill_sizes, args):  # one plan for all
            plans = [self.sample_plan(s.shapes[0], f_shapes[0],
                                      None if fill_sizes is None else fill_sizes[0], 0)] * n  # fmt: skip
            anchor = (
                (0,) * plans[0]["axes"]
                if self.valid
                else resolve_anchor(self.schema, self.anchor, plans[0]["filter_shape"], 0)
            )
            anchors = [anchor] * n
            n_loop = 0
        else:
            n_loop = n
        for i in range(n_loop):
            plan = self.sample_plan(
                s.shapes[i], f_shapes[i], None if fill_sizes is None else fill_sizes[i], i
            )
            plans.append(plan)
            a = args["anchor"][i] if "anchor" in args else self.anchor
            anchors.append(
                (0,) * plan["axes"]
                if self.valid
                else resolve_anchor(self.schema, a, plan["filter_shape"], i)
            )
        return filter_batch(
            s, filters, fills, plans, anchors, self.border, out_dtype, stream=stream
        )


def _all_equal(values: list) -> bool:
    return all(v == values[0] for v in values)


def _shapes(batch) -> list[tuple[int, ...]]:
    """Per-sample shapes of a CPU (list of arrays) or GPU (SampleList) batch."""
    if hasattr(batch, "shapes"):
        if len(batch.shapes) and uniform_rows(batch.shapes):  # (one shape: made once)
            return [tuple(batch.shapes[0].tolist())] * len(batch.shapes)
        return [tuple(int(v) for v in shp) for shp in batch.shapes]
    return [np.shape(x) for x in batch]


def _dtype(batch) -> np.dtype:
    if hasattr(batch, "shapes"):
        return np.dtype(batch.dtype)
    return np.asarray(batch[0]).dtype


@register
class ExperimentalFilter(Filter):
    """The name DALI gave :func:`filter` before it left ``experimental``."""

    schema = "experimental.filter"
    ops_name = "Filter"
