"""The host side of the GPU layout copies (kernels/layout.py): descriptors of slice, pad,
transpose, stack and cat jobs, run through a numpy model of the ``nd_copy`` kernel over a fake
device memory, against numpy's own slicing, padding, transposing, stacking and concatenating."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dlpipe.kernels.layout import (
    COPY_DESC,
    MAX_DIMS,
    coalesce,
    fill_array,
    job_descriptors,
    join_jobs,
    join_shapes,
    window_fields,
)

BASE = 1 << 20  # fake device address of element 0


class Memory:
    """A flat buffer standing in for device memory; arrays placed in it get addresses."""

    def __init__(self, dtype, size=1 << 16):
        self.buf = np.zeros(size, dtype)
        self.used = 0

    def place(self, arr=None, shape=None):
        """Put ``arr`` (or an empty array of ``shape``) at the next free place: a batch-like
        sample (address, shape, strides in elements)."""
        a = np.asarray(arr, self.buf.dtype) if arr is not None else np.zeros(shape, self.buf.dtype)
        start = self.used
        self.buf[start : start + a.size] = a.reshape(-1)
        self.used += a.size + 7
        return BASE + start * self.buf.itemsize, a.shape, _c_strides(a.shape)

    def view(self, ptr, shape, strides):
        start = (ptr - BASE) // self.buf.itemsize
        return np.lib.stride_tricks.as_strided(
            self.buf[start:],
            shape,
            tuple(s * self.buf.itemsize for s in strides),
        ).copy()


def _c_strides(shape):
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


def batch(mem, samples):
    placed = [mem.place(a) for a in samples]
    return SimpleNamespace(
        ptrs=np.array([p[0] for p in placed], np.uint64),
        shapes=np.array([p[1] for p in placed], np.int64),
        strides=np.array([p[2] for p in placed], np.int64),
        dtype=mem.buf.dtype,
    )


def out_batch(mem, shapes):
    placed = [mem.place(shape=tuple(s)) for s in shapes]
    return SimpleNamespace(
        ptrs=np.array([p[0] for p in placed], np.uint64),
        shapes=np.asarray(shapes, np.int64),
        strides=np.array([p[2] for p in placed], np.int64),
        dtype=mem.buf.dtype,
    )


def emulate(mem, descs, fill, channel_dim):
    """What ``nd_copy`` does, job by job (same-type copies)."""
    item = mem.buf.itemsize
    for d in descs:
        nd = int(d["ndim"])
        shape = d["shape"][:nd]
        coords = np.indices(shape).reshape(nd, -1)
        src = d["anchor"][:nd, None] + coords
        inside = ((src >= 0) & (src < d["in_shape"][:nd, None])).all(axis=0)
        in_off = (src * d["in_strides"][:nd, None]).sum(axis=0)
        out_off = (coords * d["out_strides"][:nd, None]).sum(axis=0)
        out_start = (int(d["out_ptr"]) - BASE) // item
        in_start = (int(d["in_ptr"]) - BASE) // item
        ch = coords[channel_dim] if 0 <= channel_dim < nd else np.zeros(coords.shape[1], int)
        vals = np.where(
            inside,
            mem.buf[in_start + np.where(inside, in_off, 0)],
            fill[np.minimum(ch, len(fill) - 1)],
        )
        mem.buf[out_start + out_off] = vals


def run_windows(samples, anchors, shapes, fill=(0,), channel_dim=-1, perm=None):
    mem = Memory(np.int32)
    s = batch(mem, samples)
    out = out_batch(mem, shapes)
    descs, ch = job_descriptors(
        s.ptrs, out.ptrs, channel_dim, **window_fields(s, out, anchors, perm)
    )
    emulate(mem, descs, fill_array(fill, np.int32), ch)
    return [
        mem.view(p, tuple(sh), st)
        for p, sh, st in zip(out.ptrs, out.shapes, out.strides, strict=True)
    ]


def ref_window(x, anchor, shape, fill, channel_dim=-1):
    out = np.empty(shape, x.dtype)
    f = np.asarray(fill)
    if f.size > 1:
        idx = [None] * x.ndim
        idx[channel_dim] = slice(None)
        out[...] = f[tuple(idx)]
    else:
        out[...] = f.reshape(-1)[0]
    for pos in np.ndindex(*shape):
        src = tuple(int(a + p) for a, p in zip(anchor, pos, strict=True))
        if all(0 <= c < e for c, e in zip(src, x.shape, strict=True)):
            out[pos] = x[src]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_random_windows_with_padding(seed):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 5))
    samples, anchors, shapes = [], [], []
    for _ in range(3):
        shp = tuple(int(v) for v in rng.integers(1, 6, ndim))
        samples.append(rng.integers(-50, 50, shp).astype(np.int32))
        anchors.append(rng.integers(-2, 4, ndim))
        shapes.append(rng.integers(0, 6, ndim))
    outs = run_windows(samples, anchors, shapes, fill=(-7,))
    for x, a, s, o in zip(samples, anchors, shapes, outs, strict=True):
        np.testing.assert_array_equal(o, ref_window(x, a, tuple(s), -7))


def test_per_channel_fill_keeps_the_channel_axis():
    x = np.arange(2 * 3 * 3, dtype=np.int32).reshape(2, 3, 3)
    outs = run_windows([x], [[-1, 1, 0]], [[4, 3, 3]], fill=(7, 8, 9), channel_dim=2)
    np.testing.assert_array_equal(outs[0], ref_window(x, (-1, 1, 0), (4, 3, 3), [7, 8, 9], 2))


@pytest.mark.parametrize("perm", [(1, 0), (2, 0, 1), (0, 2, 1), (3, 1, 0, 2), (0, 1, 2)])
def test_transpose_jobs(perm):
    rng = np.random.default_rng(len(perm))
    samples = [rng.integers(0, 99, rng.integers(1, 5, len(perm))).astype(np.int32) for _ in "ab"]
    shapes = [np.array(x.shape)[list(perm)] for x in samples]
    outs = run_windows(samples, [np.zeros(len(perm), int)] * 2, shapes, perm=perm)
    for x, o in zip(samples, outs, strict=True):
        np.testing.assert_array_equal(o, x.transpose(perm))


@pytest.mark.parametrize(
    "new_axis, axis", [(True, 0), (True, 1), (True, 2), (False, 0), (False, 1)]
)
def test_stack_and_cat_jobs(new_axis, axis):
    rng = np.random.default_rng(axis)
    mem = Memory(np.int32)
    base = [tuple(int(v) for v in rng.integers(1, 4, 2)) for _ in range(2)]  # per sample
    k = 3
    inputs = []
    for j in range(k):
        samples = []
        for shp in base:
            shp = list(shp)
            if not new_axis and axis < 2:
                shp[axis] += j  # cat: extents along the axis may differ
            samples.append(rng.integers(0, 99, shp).astype(np.int32))
        inputs.append(samples)
    ins = [batch(mem, samples) for samples in inputs]
    out = out_batch(mem, join_shapes(ins, axis, new_axis))
    in_ptrs, out_ptrs, fields = join_jobs(ins, out, axis, new_axis)
    descs, _ = job_descriptors(in_ptrs, out_ptrs, **fields)
    emulate(mem, descs, fill_array(0, np.int32), -1)
    for i in range(len(base)):
        got = mem.view(out.ptrs[i], tuple(out.shapes[i]), out.strides[i])
        parts = [inputs[j][i] for j in range(k)]
        want = np.stack(parts, axis) if new_axis else np.concatenate(parts, axis)
        np.testing.assert_array_equal(got, want)


def test_coalesce_merges_contiguous_axes_only():
    # a plain copy of (2, 3, 4): one flat axis of 24
    f = {
        "shape": [[2, 3, 4]],
        "out_strides": [[12, 4, 1]],
        "in_strides": [[12, 4, 1]],
        "anchor": [[0, 0, 0]],
        "in_shape": [[2, 3, 4]],
    }
    merged, ch = coalesce(f)
    assert merged["shape"].tolist() == [[24]] and ch == -1
    # a window cutting the middle axis: only the last two axes stay apart
    cut = dict(f, shape=[[2, 2, 4]], out_strides=[[8, 4, 1]], anchor=[[0, 1, 0]])
    merged, _ = coalesce(cut)
    assert merged["shape"].tolist() == [[2, 8]]
    assert merged["anchor"].tolist() == [[0, 4]]
    # the channel axis is kept for the fill values
    merged, ch = coalesce(f, channel_dim=2)
    assert merged["shape"].tolist() == [[6, 4]] and ch == 1


def test_descriptor_layout_and_limits():
    assert COPY_DESC.itemsize == 8 * (4 + 5 * MAX_DIMS)  # matches struct CopyDesc in slice.cu
    n = MAX_DIMS + 1
    shape = np.full((1, n), 2)
    gaps = np.array([_c_strides((4,) * n)])  # every other element: nothing merges
    with pytest.raises(ValueError, match="up to 8 dimensions"):
        job_descriptors(
            [0],
            [0],
            shape=shape,
            out_strides=np.array([_c_strides((2,) * n)]),
            in_strides=gaps,
            anchor=np.zeros((1, n)),
            in_shape=shape,
        )


def test_fill_array_converts_like_static_cast():
    np.testing.assert_array_equal(fill_array([300.7, -2.5, 3.9], np.uint8), [255, 0, 3])
    assert fill_array(1.5, np.float16).dtype == np.float16
