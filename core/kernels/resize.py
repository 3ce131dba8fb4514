"""GPU resize: one launch per batch (``resize.cu``); used by resize and random_resized_crop."""

from __future__ import annotations

import functools

import numpy as np

from . import ctype, get_function, grid_for, stream_scoped, upload
from ._batch import alloc_batch, as_samples, hwc_view

RESIZE_DESC = np.dtype(
    [(f, "<i8") for f in ("in_ptr", "out_ptr", "in_h", "in_w", "in_sy", "in_sx", "out_h", "out_w")]
    + [
        (f, "<f8")
        for f in ("roi_y0", "roi_x0", "scale_y", "scale_x", "rad_y", "rad_x", "str_y", "str_x")
    ]
)

# interpolation name -> (filter kind in resize.cu, support radius); 0 = nearest neighbour
FILTERS = {
    "nn": (0, 0.5),
    "linear": (1, 1.0),
    "triangular": (1, 1.0),
    "cubic": (2, 2.0),
    "lanczos3": (3, 3.0),
}


@functools.cache
def _get_resize_kernel(in_dtype, out_dtype, nearest: bool, device_id: int):
    name = "resize_nn" if nearest else "resize_filter"
    return get_function("resize.cu", f"{name}<{ctype(in_dtype)}, {ctype(out_dtype)}>", device_id)


@stream_scoped
def resize_batch(
    inputs,
    out_sizes,
    roi=None,
    interp: str = "linear",
    antialias: bool = True,
    out_dtype=None,
    stream=None,
):
    """Resize every HWC sample of a batch in one launch.

    Args:
        inputs: the batch (SampleList or list of CuPy arrays), HWC or HW.
        out_sizes: (N, 2) output (height, width) per sample.
        roi: optional (N, 4) float source window (y0, x0, y1, x1) per sample in pixels (the
            whole image when None); y1 < y0 or x1 < x0 flips that axis.
        interp: "nn", "linear", "cubic" or "lanczos3".
        antialias: widen the filter by the scale factor when shrinking (not for "nn").
        out_dtype: output dtype (default: the input's).
        stream: the CUDA stream.

    Returns:
        A SampleList (dense when every output has the same size).
    """
    if interp not in FILTERS:
        raise ValueError(
            f"interp={interp!r} is not supported on the GPU; use one of {sorted(FILTERS)}"
        )
    s, h, w, c, sy, sx = hwc_view(as_samples(inputs))
    n = len(s)
    out_sizes = np.asarray(out_sizes, np.int64).reshape(n, 2)
    out_dtype = np.dtype(out_dtype or s.dtype)
    channels = int(c[0]) if n else 1
    if n and not (c == channels).all():
        raise ValueError("resize: every sample of a GPU batch must have the same channel count")
    two_d = s.shapes.shape[1] == 2
    shapes = out_sizes if two_d else np.concatenate([out_sizes, np.full((n, 1), channels)], axis=1)
    out = alloc_batch(shapes, out_dtype, s.device_id)
    if n == 0:
        return out
    if roi is None:
        roi = np.stack([np.zeros(n), np.zeros(n), h, w], axis=1).astype(np.float64)
    roi = np.asarray(roi, np.float64).reshape(n, 4)
    kind, support = FILTERS[interp]
    d = np.empty(n, RESIZE_DESC)
    d["in_ptr"] = s.ptrs.view(np.int64)
    d["out_ptr"] = out.ptrs.view(np.int64)
    d["in_h"], d["in_w"], d["in_sy"], d["in_sx"] = h, w, sy, sx
    d["out_h"], d["out_w"] = out_sizes[:, 0], out_sizes[:, 1]
    d["roi_y0"], d["roi_x0"] = roi[:, 0], roi[:, 1]
    scale_y = (roi[:, 2] - roi[:, 0]) / np.maximum(out_sizes[:, 0], 1)
    scale_x = (roi[:, 3] - roi[:, 1]) / np.maximum(out_sizes[:, 1], 1)
    d["scale_y"], d["scale_x"] = scale_y, scale_x
    str_y = np.maximum(1.0, np.abs(scale_y)) if antialias else np.ones(n)
    str_x = np.maximum(1.0, np.abs(scale_x)) if antialias else np.ones(n)
    d["str_y"], d["str_x"] = str_y, str_x
    d["rad_y"], d["rad_x"] = support * str_y, support * str_x
    dev = upload(d.view(np.uint8), stream)
    grid, block = grid_for(int(out_sizes[:, 0].max()), int(out_sizes[:, 1].max()), n)
    k = _get_resize_kernel(s.dtype, out_dtype, kind == 0, s.device_id)
    keep = (s, dev)  # noqa: F841  (inputs and descriptors live until the launch is queued)
    if kind == 0:
        k(grid, block, (dev, np.int32(channels)), stream=stream)
    else:
        k(grid, block, (dev, np.int32(channels), np.int32(kind)), stream=stream)
    return out
