"""``fn.crop``, and the crop-window arithmetic that ``crop_mirror_normalize`` (and the GPU
kernels) reuse.

DALI (``crop_attr.h``, ``out_of_bounds_policy.h``): the window size comes from ``crop``
((H, W) or (D, H, W)) or from ``crop_h``/``crop_w`` (/``crop_d``), cast to int; an extent <= 0
keeps the whole input extent. Its anchor on each cropped axis is
``roundf(pos * (in_extent - crop_extent))`` in float32, rounded half away from zero, with
``pos`` = ``crop_pos_x``/``crop_pos_y``/``crop_pos_z`` (default 0.5, in [0, 1]). A window that
leaves the input is an error (``out_of_bounds_policy="error"``), is padded with
``fill_values`` (``"pad"``) or is cut to the input (``"trim_to_shape"``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._dtype import convert_sat, parse_dtype
from .._geometry.crop_args import (
    CropArgs,
    OutOfBoundsPolicy,
    apply_out_of_bounds_policy,
    crop_anchor,
    crop_window,
    default_layout,
    fill_array,
    pad_copy_extents,
    to_out_of_bounds_policy,
    window_slices,
)
from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import as_samples
from ..kernels.slice import crop_batch
from ..kernels.window import window_batch

__all__ = [
    "Crop",
    "CropArgs",
    "OutOfBoundsPolicy",
    "apply_out_of_bounds_policy",
    "crop_anchor",
    "crop_window",
    "default_layout",
    "pad_copy_extents",
    "to_out_of_bounds_policy",
]


@register(legacy=("Crop",))
class Crop(CropArgs, Operator):
    """Crops images (HWC, CHW, DHWC, FHWC, ...) to a fixed window.

    Args:
        crop: the window size, (H, W) or (D, H, W). Or else ``crop_h`` and ``crop_w`` (and
            ``crop_d``), per-sample argument inputs allowed. Without any, the whole input.
        crop_pos_x, crop_pos_y, crop_pos_z: normalized window position in [0, 1] (default 0.5,
            centred); argument inputs allowed. The anchor is ``round(pos * (in - crop))``.
        out_of_bounds_policy: ``"error"`` (default), ``"pad"`` or ``"trim_to_shape"``.
        fill_values: padding value, one or one per channel (default [0]).
        dtype: output data type (default: the input's); converted with rounding and saturation.

    Example:
        >>> with pipe:
        ...     c = fn.crop(images, crop=(224, 224), crop_pos_x=fn.random.uniform(range=(0, 1)))
    """

    schema = "crop"
    devices = ("cpu", "gpu")
    arg_inputs = CropArgs.CROP_ARG_INPUTS

    def setup(
        self,
        *,
        crop=None,
        crop_h=None,
        crop_w=None,
        crop_d=None,
        crop_pos_x=0.5,
        crop_pos_y=0.5,
        crop_pos_z=0.5,
        out_of_bounds_policy="error",
        fill_values=(0,),
        dtype=None,
        output_dtype=None,
        image_type=None,
    ) -> None:
        self.setup_crop(
            self.schema,
            crop,
            crop_h,
            crop_w,
            crop_d,
            crop_pos_x,
            crop_pos_y,
            crop_pos_z,
            out_of_bounds_policy,
            fill_values,
        )
        if dtype is not None and output_dtype is not None:
            raise ArgumentError(f"{self.schema}: give dtype or output_dtype, not both")
        self.dtype = parse_dtype(dtype if dtype is not None else output_dtype, self.schema)

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        layout = default_layout(self._layout, x.ndim, self.schema)
        dtype = self.dtype or x.dtype
        anchor, shape = self.sample_window(x.shape, layout, args)
        src, dst, padded = window_slices(x.shape, anchor, shape)
        if not padded:
            return np.ascontiguousarray(convert_sat(x[src], dtype) if dtype != x.dtype else x[src])
        c_axis = layout.find("C")
        fill = fill_array(
            self.fill_values, x.shape[c_axis] if c_axis >= 0 else None, dtype, self.schema
        )
        out = np.empty(shape, dtype)
        if fill.size > 1:
            bshape = [1] * x.ndim
            bshape[c_axis] = fill.size
            out[...] = fill.reshape(bshape)
        else:
            out.fill(fill[0])
        convert_sat(x[src], dtype, out=out[dst])
        return out

    def run_batch(self, inputs, args, params, stream):
        """GPU: one launch for the batch; HWC and HW samples take the 2-D kernel, any other
        layout (DHWC, CDHW, FDHWC, CHW, ...) the N-D window kernel."""
        s, layout, wins = gpu_windows(self, inputs[0], args, None)
        dtype = self.dtype or s.dtype
        c_axis = layout.find("C")
        nch = int(s.shapes[0, c_axis]) if len(s) and c_axis >= 0 else 1
        fill = fill_array(self.fill_values, nch if c_axis >= 0 else None, dtype, self.schema)
        if layout not in ("HWC", "HW"):
            return window_batch(
                s, wins[:, 0], wins[:, 1], fill=fill, c_axis=c_axis, out_dtype=dtype, stream=stream
            )
        (y0, x0), (oh, ow) = wins[:, 0, :2].T, wins[:, 1, :2].T
        return crop_batch(s, oh, ow, y0, x0, fill=fill, out_dtype=dtype, stream=stream)


# Argument inputs that move or size a crop window (others, like mirror, do not).
_WINDOW_ARGS = frozenset(
    {"crop", "crop_h", "crop_w", "crop_d", "crop_pos_x", "crop_pos_y", "crop_pos_z"}
)


def gpu_windows(
    op: CropArgs, batch, args: dict, layouts: Sequence[str] | None, who: str | None = None
):
    """The GPU side of :class:`CropArgs`: ``(samples, layout, windows)`` for a batch, with
    ``windows[i] = (anchor, shape)`` of sample ``i`` (an int64 array of shape (N, 2, ndim)).

    Raises:
        ArgumentError: when the layout is not one of ``layouts`` (what the kernel handles;
            None: any).
    """
    s = as_samples(batch)
    n = len(s)
    ndim = s.shapes.shape[1] if n else len(op._layout or (layouts or ("HWC",))[0])
    layout = default_layout(op._layout, ndim, op._crop_who)
    if layouts is not None and layout not in layouts:
        raise ArgumentError(
            f"{who or op._crop_who}: device='gpu' supports the layouts {list(layouts)}, got "
            f"{layout!r}; run it on the CPU"
        )
    wins = np.zeros((n, 2, ndim), np.int64)
    if not op.has_crop(args):  # no window, static or per sample: every sample whole
        wins[:, 1] = s.shapes
        return s, layout, wins
    if not _WINDOW_ARGS.intersection(args):  # the window depends on the shape alone
        return s, layout, op.static_windows(s.shapes, layout)
    for i in range(n):
        sample_args = {k: v[i] for k, v in args.items()}
        shape = tuple(int(v) for v in s.shapes[i])
        if op.has_crop(sample_args):
            wins[i] = op.sample_window(shape, layout, sample_args)
        else:
            wins[i, 1] = shape
    return s, layout, wins
