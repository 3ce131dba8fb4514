"""GPU affine warps (``warp.cu``) for ``fn.warp_affine`` and ``fn.rotate``: one launch per batch,
every frame of every sample a block row of its own (``blockIdx.z``)."""

from __future__ import annotations

import functools

import numpy as np

from . import ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples, c_strides, sample_list, uniform_row, uniform_rows

WARP_DESC = np.dtype(
    [
        ("in_ptr", "<i8"),
        ("out_ptr", "<i8"),
        ("in_size", "<i8", (3,)),
        ("in_stride", "<i8", (3,)),
        ("out_size", "<i8", (3,)),
        ("out_stride", "<i8", (3,)),
        ("channels", "<i8"),
        ("mat_index", "<i8"),
        ("m", "<f4", (12,)),
        ("border_out", "<f8"),
        ("border_in", "<f8"),
    ]
)
_MAX_GRID_Z = 65535


@functools.cache
def _get_warp_kernel(in_dtype, out_dtype, ndim: int, interp: int, clamp: bool, device_id: int):
    expr = (
        f"warp_affine<{ctype(in_dtype)}, {ctype(out_dtype)}, {ndim}, {interp}, "
        f"{'true' if clamp else 'false'}>"
    )
    return get_function("warp.cu", expr, device_id)


def warp_descriptors(
    in_ptrs,
    in_shapes,
    in_strides,
    out_ptrs,
    out_shapes,
    frames: bool,
    channels: bool,
    spatial_ndim: int,
    in_itemsize: int,
    out_itemsize: int,
    mats: np.ndarray | None,
    border,
) -> np.ndarray:
    """One ``WarpDesc`` per frame of every sample (host side, no GPU needed), built with a few
    numpy calls over the batch (no per-sample Python: the GPU stage's host work per batch is
    what limits the automatic augmentations, BENCHMARKS.md "Automatic augmentation: the host
    bookkeeping").

    Args:
        in_ptrs, out_ptrs: device addresses of the samples.
        in_shapes, in_strides: the input samples' shapes and strides (elements); the channel
            axis, if any, must have stride 1.
        out_shapes: the output samples' shapes (C-contiguous).
        frames, channels: whether the layout has a leading F / a trailing C axis.
        spatial_ndim: 2 or 3.
        in_itemsize, out_itemsize: element sizes in bytes.
        mats: (N, nd * (nd + 1)) float32 matrices, or None when they are on the device.
        border: (as output type, as input type) or None.
    """
    in_shapes = np.asarray(in_shapes, np.int64)
    n = len(in_shapes)
    in_shapes = in_shapes.reshape(n, -1)
    in_strides = np.asarray(in_strides, np.int64).reshape(in_shapes.shape)
    out_shapes = np.asarray(out_shapes, np.int64).reshape(n, -1)
    out_strides = c_strides(out_shapes)
    in_ptr = np.asarray(in_ptrs, np.uint64).view(np.int64)
    out_ptr = np.asarray(out_ptrs, np.uint64).view(np.int64)
    first = 1 if frames else 0
    sp = slice(first, first + spatial_ndim)
    # (x, y[, z]) order, padded to 3 with extent 1 / stride 0
    geo = np.zeros((n, 4, 3), np.int64)
    geo[:, (0, 2), spatial_ndim:] = 1
    geo[:, 0, :spatial_ndim] = in_shapes[:, sp][:, ::-1]
    geo[:, 1, :spatial_ndim] = in_strides[:, sp][:, ::-1]
    geo[:, 2, :spatial_ndim] = out_shapes[:, sp][:, ::-1]
    geo[:, 3, :spatial_ndim] = out_strides[:, sp][:, ::-1]
    if frames:  # one descriptor per frame, pointers stepped by the frame strides
        nf = in_shapes[:, 0]
        sample = np.repeat(np.arange(n), nf)
        frame = np.arange(len(sample)) - np.repeat(np.cumsum(nf) - nf, nf)
        in_ptr = in_ptr[sample] + frame * in_strides[sample, 0] * in_itemsize
        out_ptr = out_ptr[sample] + frame * out_strides[sample, 0] * out_itemsize
        geo = geo[sample]
    else:
        sample = np.arange(n)
    d = np.zeros(len(sample), WARP_DESC)
    d["in_ptr"], d["out_ptr"] = in_ptr, out_ptr
    d["in_size"], d["in_stride"] = geo[:, 0], geo[:, 1]
    d["out_size"], d["out_stride"] = geo[:, 2], geo[:, 3]
    d["channels"] = in_shapes[sample, -1] if channels else 1
    d["mat_index"] = sample
    if mats is not None and len(sample):
        nm = spatial_ndim * (spatial_ndim + 1)
        m = np.asarray(mats, np.float32).reshape(-1, nm)
        d["m"][:, :nm] = m if not frames and len(m) == n else m[sample]
    if border is not None:
        d["border_out"], d["border_in"] = float(border[0]), float(border[1])
    return d


@functools.lru_cache(maxsize=1024)
def warp_layout(
    in_shape: tuple,
    in_strides: tuple,
    size: tuple,
    channels: bool,
    spatial_ndim: int,
    in_itemsize: int,
    out_itemsize: int,
    border_bytes: bytes | None,
) -> tuple[tuple, np.ndarray]:
    """The output sample shape and the descriptor of a batch whose samples (no frames) all
    have ``in_shape`` / ``in_strides`` and the output spatial ``size``, memoised: what
    :func:`warp_descriptors` gives every such sample, pointers and matrix aside (the
    automatic augmentations warp batches of one image size, batch after batch).
    ``border_bytes``: the border values as float64 bytes (-0.0 is not 0.0), or None."""
    border = None if border_bytes is None else np.frombuffer(border_bytes, np.float64)
    out_shape = (*size, in_shape[-1]) if channels else tuple(size)
    row = warp_descriptors([0], [in_shape], [in_strides], [0], [out_shape], False, channels,
                           spatial_ndim, in_itemsize, out_itemsize, None, border)  # fmt: skip
    row.flags.writeable = False
    return out_shape, row


def uniform_warp_descriptors(row: np.ndarray, in_ptrs, out_ptrs, mats, spatial_ndim: int):
    """:func:`warp_descriptors` of a batch of one layout (:func:`warp_layout`'s ``row``): the
    row once per sample with its pointers, index and matrix written in."""
    n = len(in_ptrs)
    d = np.empty(n, WARP_DESC)
    d[:] = row[0]
    d["in_ptr"] = np.asarray(in_ptrs, np.uint64).view(np.int64)
    d["out_ptr"] = np.asarray(out_ptrs, np.uint64).view(np.int64)
    d["mat_index"] = np.arange(n)
    if mats is not None:
        nm = spatial_ndim * (spatial_ndim + 1)
        d["m"][:, :nm] = np.asarray(mats, np.float32).reshape(n, nm)
    return d


def device_matrices(who: str, mtx, n: int, spatial_ndim: int, invert: bool, stream=None):
    """The matrices of the second positional input (on the GPU) as one contiguous float32
    device array of (n, nd * (nd + 1)), and whether the kernel must invert them."""
    import cupy

    from ..errors import ArgumentError

    s = as_samples(mtx)
    nm = spatial_ndim * (spatial_ndim + 1)
    if s.dtype != np.float32:
        raise ArgumentError(f"{who}: the matrix input must be FLOAT (float32), got {s.dtype}")
    with stream or cupy.cuda.Stream.null:
        if len(s) == n and all(int(np.prod(sh)) == nm for sh in s.shapes):
            arr = s.dense if s.dense is not None else cupy.stack([a.reshape(-1) for a in s])
        elif len(s) == 1 and int(np.prod(s.shapes[0])) == n * nm:
            arr = s[0]
        else:
            raise ArgumentError(
                f"{who}: the matrix input must hold one ({spatial_ndim}, {spatial_ndim + 1}) "
                f"float32 matrix per sample; got shapes {s.shapes.tolist()}"
            )
        arr = cupy.ascontiguousarray(arr.reshape(n, nm), dtype=np.float32)
    return arr, invert


@stream_scoped
def warp_batch(
    inputs, frames, channels, spatial_ndim, mats, sizes, interp, border, out_dtype, stream=None
):
    """Warp every sample (every frame of it) with its matrix, in one launch.

    Args:
        inputs: the batch (SampleList or CuPy arrays), channels last.
        frames, channels, spatial_ndim: the layout (leading F axis, trailing C axis, 2 or 3).
        mats: (N, nd * (nd + 1)) float32 destination-to-source matrices on the host, or
            ``(device array, invert)`` from :func:`device_matrices`.
        sizes: per sample, the output's spatial shape ((H, W) or (D, H, W)): an (N, nd)
            array or a list of tuples.
        interp: 0 nearest neighbour, 1 linear.
        border: (as output type, as input type), or None to clamp to the edge.
        out_dtype: the output type.
        stream: the CUDA stream.

    Returns:
        A SampleList of the warped samples (the input's rank and layout).
    """
    import cupy

    SampleList = sample_list()
    s = as_samples(inputs)
    n = len(s)
    out_dtype = np.dtype(out_dtype)
    if n == 0:
        return alloc_batch(np.zeros((0, 0)), out_dtype, s.device_id)
    if channels and not (s.strides[:, -1] == 1).all():
        s = SampleList.from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)
    sizes = np.asarray(sizes, np.int64).reshape(n, spatial_ndim)
    dev_mats, invert = (None, False)
    if isinstance(mats, tuple):
        dev_mats, invert = mats
        host_mats = None
    else:
        host_mats = mats
    in_row = None if frames else uniform_row(s)
    if in_row is not None and uniform_rows(sizes):
        out_shape, row = warp_layout(
            *in_row,
            tuple(sizes[0].tolist()),
            channels,
            spatial_ndim,
            s.dtype.itemsize,
            out_dtype.itemsize,
            None if border is None else np.array(border, np.float64).tobytes(),
        )
        out = SampleList.from_dense(cupy.empty((n, *out_shape), out_dtype))
        d = uniform_warp_descriptors(row, s.ptrs, out.ptrs, host_mats, spatial_ndim)
    else:
        cols = [sizes]
        if frames:
            cols.insert(0, s.shapes[:, :1])
        if channels:
            cols.append(s.shapes[:, -1:])
        out_shapes = np.concatenate(cols, axis=1) if len(cols) > 1 else cols[0]
        out = alloc_batch(out_shapes, out_dtype, s.device_id)
        d = warp_descriptors(
            s.ptrs,
            s.shapes,
            s.strides,
            out.ptrs,
            out_shapes,
            frames,
            channels,
            spatial_ndim,
            s.dtype.itemsize,
            out_dtype.itemsize,
            host_mats,
            border,
        )
    if len(d) == 0:
        return out
    k = _get_warp_kernel(s.dtype, out_dtype, spatial_ndim, int(interp), border is None, s.device_id)
    dev = upload(d.view(np.uint8), stream)
    max_w = int(d["out_size"][:, 0].max())
    max_h = int(d["out_size"][:, 1].max())
    block = (32, 8, 1)
    mats_arg = dev_mats if dev_mats is not None else np.uintp(0)
    for start in range(0, len(d), _MAX_GRID_Z):
        count = min(_MAX_GRID_Z, len(d) - start)
        grid = ((max_w + 31) // 32, (max_h + 7) // 8, count)
        descs = dev[start * WARP_DESC.itemsize :] if start else dev  # (a view costs a call)
        k(grid, block, (descs, mats_arg, np.int32(invert)), stream=stream)
    return out
