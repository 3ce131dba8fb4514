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


def blur_elements(shapes, strides, start: int, axes: int, channels: bool) -> dict:
    """The batch's elements (each index of the leading ``start`` axes of each sample: a frame
    or a channel plane), as numpy arrays over the batch.

    Returns:
        ``sample`` (E,): the element's sample; ``offset`` (E,): its first input element within
        the sample; ``index`` (E,): its number within the sample; and per sample ``size`` (N, 3)
        the data extents (d, h, w; 1 where absent), ``stride`` (N, 3) the input strides of
        those axes (0 where absent) and ``channels`` (N,).
    """
    shapes = np.asarray(shapes, np.int64)
    strides = np.asarray(strides, np.int64)
    n = len(shapes)
    size = np.ones((n, 3), np.int64)
    stride = np.zeros((n, 3), np.int64)
    size[:, 3 - axes :] = shapes[:, start : start + axes]
    stride[:, 3 - axes :] = strides[:, start : start + axes]
    chan = shapes[:, -1].copy() if channels else np.ones(n, np.int64)
    counts = shapes[:, :start].prod(axis=1)
    sample = np.repeat(np.arange(n), counts)
    index = np.arange(len(sample)) - np.repeat(np.cumsum(counts) - counts, counts)
    offset = np.zeros(len(sample), np.int64)
    rest = index.copy()
    for a in reversed(range(start)):  # C order over the leading axes, as np.ndindex
        extent = shapes[sample, a]
        offset += rest % extent * strides[sample, a]
        rest //= extent
    return dict(sample=sample, offset=offset, index=index, size=size, stride=stride, channels=chan)


def blur_pass_descriptors(
    el: dict, in_ptrs, in_itemsize, out_ptrs, out_itemsize, tmp_ptrs, acc_itemsize, axes, win_offs
) -> np.ndarray:
    """The descriptors of every pass (innermost axis first), end to end: pass ``p`` of
    element ``e`` is row ``p * E + e``.

    The first pass reads the samples (``in_ptrs``, their strides), the last writes the output
    samples (``out_ptrs``; an element ``index`` volumes into its sample); the passes between
    go through contiguous intermediates (``tmp_ptrs``, 1 or 2 buffers, each element at its
    place in the batch's elements), alternating.

    Args:
        el: ``blur_elements``' arrays.
        in_ptrs, out_ptrs: (N,) the samples' addresses; ``*_itemsize`` their element sizes.
        tmp_ptrs: the intermediates' addresses (``min(axes - 1, 2)`` of them).
        axes: the number of data axes.
        win_offs: (N, 3, 2) per sample and axis (d, h, w) its window's (offset, size).
    """
    smp = el["sample"]
    size = el["size"][smp]
    chan = el["channels"][smp]
    dense = np.stack([size[:, 1] * size[:, 2] * chan, size[:, 2] * chan, chan], axis=1)
    vol = size.prod(axis=1) * chan
    first = np.cumsum(vol) - vol
    ins = np.asarray(in_ptrs, np.uint64).view(np.int64)[smp] + el["offset"] * in_itemsize
    outs = np.asarray(out_ptrs, np.uint64).view(np.int64)[smp] + el["index"] * vol * out_itemsize
    tmps = [int(t) + first * acc_itemsize for t in tmp_ptrs]
    ne = len(smp)
    d = np.zeros(axes * ne, BLUR_DESC)
    src, src_stride = ins, el["stride"][smp]
    for p, a in enumerate(reversed(range(axes))):
        axis = 3 - axes + a
        dst = outs if p == axes - 1 else tmps[p % 2]
        rows = d[p * ne : (p + 1) * ne]
        rows["in_ptr"], rows["out_ptr"] = src, dst
        rows["size"], rows["in_stride"], rows["out_stride"] = size, src_stride, dense
        rows["channels"] = chan
        rows["win_off"] = win_offs[smp, axis, 0]
        rows["win_size"] = win_offs[smp, axis, 1]
        src, src_stride = dst, dense
    return d


@stream_scoped
def blur_batch(inputs, start, axes, channels, plan, sets, out_dtype, stream=None):
    """Gaussian-blur every sample of a batch.

    Args:
        inputs: the batch (SampleList or CuPy arrays).
        start, axes, channels: the first data axis, the number of data axes (1..3) and whether
            a channel axis ends the layout.
        plan: the windows (an ``operators._blur_plan.WindowPlan``: ``flat`` float32 taps,
            ``offs`` (sets, 3, 2) each set's (offset, size) per axis d, h, w).
        sets: (N,) each sample's set of windows in ``plan``.
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
    el = blur_elements(s.shapes, s.strides, start, axes, channels)
    ne = len(el["sample"])
    if not ne:
        return out
    size = el["size"][el["sample"]]
    chan = el["channels"][el["sample"]]
    tmp = [cupy.empty(int((size.prod(axis=1) * chan).sum()), acc) for _ in range(min(axes - 1, 2))]
    descs = blur_pass_descriptors(
        el,
        s.ptrs,
        s.dtype.itemsize,
        out.ptrs,
        out_dtype.itemsize,
        [t.data.ptr for t in tmp],
        acc.itemsize,
        axes,
        plan.offs[np.asarray(sets, np.int64)],
    )
    # descriptors and taps in one upload: the taps after the descriptors (16-byte aligned)
    head = descs.view(np.uint8)
    host = np.empty(head.size + plan.flat.nbytes, np.uint8)
    host[: head.size] = head
    host[head.size :] = plan.flat.view(np.uint8)
    dev = upload(host, stream)
    dev_windows = dev[head.size :]
    max_wc = int((size[:, 2] * chan).max())
    max_h = int(size[:, 1].max())
    block = (32, 8, 1)
    for p in range(axes):
        idt = s.dtype if p == 0 else acc
        odt = out_dtype if p == axes - 1 else acc
        k = _get_blur_kernel(idt, odt, acc, s.device_id)
        for first in range(0, ne, _MAX_GRID_Z):
            count = min(_MAX_GRID_Z, ne - first)
            grid = ((max_wc + 31) // 32, (max_h + 7) // 8, count)
            descs_ptr = dev[(p * ne + first) * BLUR_DESC.itemsize :]
            k(grid, block, (descs_ptr, dev_windows, np.int32(2 - p)), stream=stream)  # axis
    return out
