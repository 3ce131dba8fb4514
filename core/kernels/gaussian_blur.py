"""GPU ``fn.gaussian_blur`` (``gaussian_blur.cu``): one launch per data axis for the whole batch,
innermost axis first, through a float (double for double data) intermediate."""

from __future__ import annotations

import functools

import numpy as np

from . import ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples

BLUR_DESC = np.dtype(
    [
        ("in_ptr", "<i8"),
        ("out_ptr", "<i8"),
        ("size", "<i8", (3,)),
        ("in_stride", "<i8", (3,)),
        ("out_stride", "<i8", (3,)),
        ("channels", "<i8"),
        ("win_off", "<i8"),
        ("win_size", "<i8"),
    ]
)
_MAX_GRID_Z = 65535


@functools.cache
def _get_blur_kernel(in_dtype, out_dtype, acc_dtype, device_id: int):
    expr = f"blur_axis<{ctype(in_dtype)}, {ctype(out_dtype)}, {ctype(acc_dtype)}>"
    return get_function("gaussian_blur.cu", expr, device_id)


def blur_elements(shapes, strides, start: int, axes: int, channels: bool):
    """Per element (each index of the leading ``start`` axes of each sample): (sample, element
    offset in input elements, element number within the sample), and per sample the data
    extents (d, h, w; 1 where absent), the input strides of those axes and the channel count."""
    elems, geo = [], []
    for i, (shape, st) in enumerate(zip(shapes, strides, strict=True)):
        shape = [int(v) for v in shape]
        st = [int(v) for v in st]
        lead = shape[:start]
        data = shape[start : start + axes]
        dst = st[start : start + axes]
        size = [1] * (3 - axes) + data
        stride = [0] * (3 - axes) + dst
        c = shape[-1] if channels else 1
        geo.append((size, stride, c))
        for j, idx in enumerate(np.ndindex(*lead) if lead else [()]):
            off = sum(k * s for k, s in zip(idx, st[:start], strict=True))
            elems.append((i, off, j))
    return elems, geo


def blur_descriptors(elems, geo, in_ptrs, in_strides_of, out_ptrs, win_offs, axis) -> np.ndarray:
    """The descriptors of one pass along ``axis`` (0 = d, 1 = h, 2 = w).

    ``in_ptrs``/``out_ptrs``: per element, the data's address; ``in_strides_of(sample)`` gives
    the (d, h, w) strides of the pass's input (the sample's own, or the contiguous intermediate);
    the output is contiguous. ``win_offs[sample]`` = (offset, size) of the window per axis.
    """
    d = np.zeros(len(elems), BLUR_DESC)
    for k, (i, _, _) in enumerate(elems):
        size, _, c = geo[i]
        d["in_ptr"][k], d["out_ptr"][k] = in_ptrs[k], out_ptrs[k]
        d["size"][k] = size
        d["in_stride"][k] = in_strides_of(i)
        d["out_stride"][k] = [size[1] * size[2] * c, size[2] * c, c]
        d["channels"][k] = c
        d["win_off"][k], d["win_size"][k] = win_offs[i][axis]
    return d


@stream_scoped
def blur_batch(inputs, start, axes, channels, windows, out_dtype, stream=None):
    """Gaussian-blur every sample of a batch.

    Args:
        inputs: the batch (SampleList or CuPy arrays).
        start, axes, channels: the first data axis, the number of data axes (1..3) and whether
            a channel axis ends the layout.
        windows: per sample, the float32 window of each data axis (outermost first).
        out_dtype: the output type.
        stream: the CUDA stream.

    Returns:
        A SampleList of the blurred samples (the input's shapes).
    """
    import cupy

    from ..tensors_gpu import SampleList

    s = as_samples(inputs)
    n = len(s)
    out_dtype = np.dtype(out_dtype)
    if n == 0:
        return alloc_batch(np.zeros((0, 0)), out_dtype, s.device_id)
    if channels and not (s.strides[:, -1] == 1).all():
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    acc = np.dtype(np.float64 if s.dtype == np.float64 else np.float32)
    out = alloc_batch(s.shapes, out_dtype, s.device_id)
    elems, geo = blur_elements(s.shapes, s.strides, start, axes, channels)
    if not elems:
        return out
    # windows of all samples in one array: per sample and axis (d, h, w) its offset and size
    flat, win_offs, pos = [], [], 0
    for ws in windows:
        offs = [(0, 1)] * (3 - axes)
        for w in ws:
            offs.append((pos, w.size))
            flat.append(w)
            pos += w.size
        win_offs.append(offs)
    dev_windows = upload(np.concatenate(flat).astype(np.float32), stream)
    vol = [int(np.prod(geo[i][0])) * geo[i][2] for i, _, _ in elems]
    elem_start = np.concatenate([[0], np.cumsum(vol)[:-1]]).astype(np.int64)
    in_ptrs = [int(s.ptrs[i]) + off * s.dtype.itemsize for i, off, _ in elems]
    out_ptrs = [
        int(out.ptrs[i]) + j * vol[k] * out_dtype.itemsize for k, (i, _, j) in enumerate(elems)
    ]
    tmp = [cupy.empty(int(sum(vol)), acc) for _ in range(min(axes - 1, 2))]
    tmp_ptrs = [[t.data.ptr + int(o) * acc.itemsize for o in elem_start] for t in tmp]

    def contiguous(i):
        size, _, c = geo[i]
        return [size[1] * size[2] * c, size[2] * c, c]

    passes = []  # (in dtype, in ptrs, in strides, out dtype, out ptrs, axis)
    src = (s.dtype, in_ptrs, lambda i: geo[i][1])
    for p, a in enumerate(reversed(range(axes))):
        axis = 3 - axes + a
        last = p == axes - 1
        dst = (out_dtype, out_ptrs) if last else (acc, tmp_ptrs[p % 2])
        passes.append((src[0], src[1], src[2], dst[0], dst[1], axis))
        src = (dst[0], dst[1], contiguous)
    descs = [
        blur_descriptors(elems, geo, ip, ist, op, win_offs, axis)
        for _, ip, ist, _, op, axis in passes
    ]
    dev = upload(np.concatenate(descs).view(np.uint8), stream)
    max_wc = max(geo[i][0][2] * geo[i][2] for i, _, _ in elems)
    max_h = max(geo[i][0][1] for i, _, _ in elems)
    block = (32, 8, 1)
    ne = len(elems)
    for p, (idt, _, _, odt, _, axis) in enumerate(passes):
        k = _get_blur_kernel(idt, odt, acc, s.device_id)
        for first in range(0, ne, _MAX_GRID_Z):
            count = min(_MAX_GRID_Z, ne - first)
            grid = ((max_wc + 31) // 32, (max_h + 7) // 8, count)
            descs_ptr = dev[(p * ne + first) * BLUR_DESC.itemsize :]
            k(grid, block, (descs_ptr, dev_windows, np.int32(axis)), stream=stream)
    return out
