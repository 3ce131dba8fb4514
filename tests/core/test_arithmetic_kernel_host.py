"""The host side of the fused expression kernel, without a GPU: per-sample broadcast strides,
merged dimensions and the descriptor table are replayed here by a Python model of the kernel's
index arithmetic over a flat "device memory", and compared with numpy broadcasting; and the
generated source names every step."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.kernels.arithmetic import (
    broadcast_batch,
    broadcast_shape,
    broadcast_strides,
    kernel_source,
    merge_dims,
    pack_descriptors,
)
from dlpipe.operators.arithmetic import plan


def replay(descs: np.ndarray, ndim: int, n_inputs: int, memory: np.ndarray) -> list:
    """What the kernel reads: per sample, per element, each input's value (as the generated
    code computes offsets: the element index split over the extents, times the strides)."""
    out = []
    for row in descs:
        total = int(row[1])
        ext = row[2 : 2 + ndim]
        vals = []
        for i in range(total):
            rem, coords = i, [0] * ndim
            for d in range(ndim - 1, -1, -1):
                coords[d] = rem % int(ext[d])
                rem //= int(ext[d])
            per_input = []
            for j in range(n_inputs):
                base = 2 + ndim + j * (1 + ndim)
                ptr = int(row[base])
                strides = row[base + 1 : base + 1 + ndim]
                per_input.append(
                    memory[ptr + sum(c * int(s) for c, s in zip(coords, strides, strict=True))]
                )
            vals.append(per_input)
        out.append(vals)
    return out


@pytest.mark.parametrize(
    "shapes",
    [
        [[(4, 5, 3), (3,)], [(2, 7, 3), (3,)]],  # image x per-channel constant
        [[(4, 5, 3), ()], [(2, 7, 3), ()]],  # per-sample scalar
        [[(4, 1, 3), (2, 3)], [(2, 3), (2, 1)]],  # both broadcast, ragged
        [[(6,), (6,)], [(1,), (9,)]],  # contiguous: merges to 1-D
        [[(2, 3, 4, 5), (1, 3, 1, 5)], [(1, 1, 1, 1), (2, 2, 2, 2)]],
    ],
)
def test_descriptors_read_what_numpy_broadcasting_reads(shapes):
    rng = np.random.default_rng(0)
    memory, arrays, ptrs = [], [], [[], []]
    offset = 0
    for sample in shapes:
        arrs = []
        for j, shp in enumerate(sample):
            a = rng.integers(0, 1000, shp)
            arrs.append(a)
            ptrs[j].append(offset)
            memory.append(a.reshape(-1))
            offset += a.size
        arrays.append(arrs)
    memory = np.concatenate(memory)
    out_shapes = [broadcast_shape([a.shape for a in arrs]) for arrs in arrays]
    n = len(shapes)
    ndim = max(1, max(len(s) for s in out_shapes))
    extents = np.ones((n, ndim), np.int64)
    strides = [np.zeros((n, ndim), np.int64) for _ in range(2)]
    for i, arrs in enumerate(arrays):
        extents[i, ndim - len(out_shapes[i]) :] = out_shapes[i]
        for j, a in enumerate(arrs):
            st = broadcast_strides(a.shape, [s // a.itemsize for s in a.strides], out_shapes[i])
            if st:
                strides[j][i, ndim - len(st) :] = st
    ext, sts = merge_dims(extents, strides)
    descs = pack_descriptors([0] * n, extents.prod(axis=1), ext, ptrs, sts)
    got = replay(descs, ext.shape[1], 2, memory)
    for i, arrs in enumerate(arrays):
        want = np.stack(np.broadcast_arrays(*arrs), axis=-1).reshape(-1, 2)
        np.testing.assert_array_equal(np.array(got[i]).reshape(-1, 2), want)


def test_contiguous_batches_merge_to_one_dimension():
    ext = np.array([[4, 5, 3], [2, 7, 3]], np.int64)
    c = np.array([[15, 3, 1], [21, 3, 1]], np.int64)
    scalar = np.zeros((2, 3), np.int64)
    e, (s1, s2) = merge_dims(ext, [c, scalar])
    assert e.tolist() == [[60], [42]] and s1.tolist() == [[1], [1]] and s2.tolist() == [[0], [0]]
    chan = np.array([[0, 0, 1], [0, 0, 1]], np.int64)
    e, (s1, s2) = merge_dims(ext, [c, chan])
    assert e.tolist() == [[20, 3], [14, 3]] and s2.tolist() == [[0, 1], [0, 1]]


def test_broadcast_shape_error_names_both_shapes():
    with pytest.raises(ValueError, match=r"Can't broadcast shapes:\n1 x 4 \(d=1\)\n3 \(d=0\)"):
        broadcast_shape([(1, 4), (3,)])


def test_generated_source_has_every_step_and_one_entry_point():
    steps = plan(
        ("clamp", ("fdiv", ("in", 0), ("const", 255.0, "float32")), ("in", 1), ("in", 1)),
        ("uint8", "float16"),
    )
    src = kernel_source(steps, 2, False)
    assert src.count('extern "C" __global__ void dl_expr(') == 1
    for s in range(len(steps)):
        assert f"v{s} =" in src
    assert "dl_clamp<float>" in src and "half_to_float(in1" in src
    assert "rem % e" in src  # two dimensions: the index is split over the extents
    assert "rem" not in kernel_source(steps, 1, False)  # one dimension: no divisions


class _Batch:
    """What the launcher reads of a SampleList: shapes and strides (elements)."""

    def __init__(self, shapes, strides):
        self.shapes = np.array(shapes, np.int64).reshape(len(shapes), -1)
        self.strides = np.array(strides, np.int64).reshape(self.shapes.shape)

    def __len__(self):
        return len(self.shapes)


def test_broadcast_batch_equal_shapes_and_scalars():
    a = _Batch([(4, 3), (1, 3)], [(3, 1), (3, 1)])
    b = _Batch([(4, 3), (1, 3)], [(6, 2), (3, 1)])  # a strided view
    s = _Batch([(), ()], [(), ()])
    shapes, strides = broadcast_batch([a, b, s])
    assert shapes.tolist() == [[4, 3], [1, 3]]
    assert strides[0].tolist() == [[3, 1], [0, 1]]  # extent 1: stride 0
    assert strides[1].tolist() == [[6, 2], [0, 1]] and strides[2].tolist() == [[0, 0], [0, 0]]
    assert broadcast_batch([a, _Batch([(3,), (3,)], [(1,), (1,)])])[0].tolist() == [
        [4, 3],
        [1, 3],
    ]
    assert broadcast_batch([a, _Batch([(2,), (3,)], [(1,), (1,)])]) is None  # sample 0: 3 vs 2
    shapes, strides = broadcast_batch([s, s])
    assert shapes.shape == (2, 0) and strides[0].shape == (2, 0)


@pytest.mark.parametrize("seed", range(6))
def test_broadcast_batch_matches_numpy_per_sample(seed):
    """Random ragged batches (per-channel constants, per-sample scalars, size-0 and size-1
    extents, strided inputs) against ``np.broadcast_shapes`` and the strides numpy's
    broadcasting uses, sample by sample."""
    rng = np.random.default_rng(seed)
    n = 7
    ranks = [3, 1, 0, 2]
    shapes = [[], [], [], []]
    for _ in range(n):
        full = [int(v) for v in rng.integers(0, 4, 3)]  # 0 included
        for k, r in enumerate(ranks):
            shp = full[3 - r :]
            shapes[k].append(tuple(1 if rng.random() < 0.4 else v for v in shp))
    batches = []
    for k, r in enumerate(ranks):
        strides = [tuple(int(v) for v in rng.integers(1, 50, r)) for _ in range(n)]
        batches.append(_Batch(shapes[k], strides))
    got = broadcast_batch(batches)
    assert got is not None
    out, strides = got
    for i in range(n):
        want = np.broadcast_shapes(*(shapes[k][i] for k in range(4)))
        assert tuple(out[i]) == want
        for k in range(4):
            own = batches[k].strides[i].tolist()
            lead = len(want) - len(own)
            ref = [0] * lead + [
                0 if e == 1 else st for e, st in zip(shapes[k][i], own, strict=True)
            ]
            assert strides[k][i].tolist() == ref
    bad = _Batch([(2, 3)] * n, [(3, 1)] * n)
    other = _Batch([(2, 3)] * (n - 1) + [(4, 3)], [(3, 1)] * n)
    assert broadcast_batch([bad, other]) is None


@pytest.mark.parametrize(
    "shapes",
    [
        [[(4, 5, 3), (3,)], [(2, 7, 3), (3,)]],
        [[(4, 1, 3), (2, 3)], [(2, 1, 3), (1, 3)]],  # both broadcast, ragged
        [[(2, 3, 4, 5), (1, 3, 1, 5)], [(1, 1, 1, 1), (2, 2, 2, 2)]],
    ],
)
def test_broadcast_batch_descriptors_read_what_numpy_reads(shapes):
    """The launcher's path (``broadcast_batch`` -> ``merge_dims`` -> ``pack_descriptors``)
    replayed over a flat memory, against numpy's broadcasting."""
    rng = np.random.default_rng(1)
    memory, arrays, ptrs = [], [], [[], []]
    offset = 0
    for sample in shapes:
        arrs = []
        for j, shp in enumerate(sample):
            a = rng.integers(0, 1000, shp)
            arrs.append(a)
            ptrs[j].append(offset)
            memory.append(a.reshape(-1))
            offset += a.size
        arrays.append(arrs)
    memory = np.concatenate(memory)
    batches = [
        _Batch(
            [arrs[j].shape for arrs in arrays],
            [[s // 8 for s in arrs[j].strides] for arrs in arrays],
        )  # fmt: skip
        for j in range(2)
    ]
    out, strides = broadcast_batch(batches)
    ext, sts = merge_dims(out, strides)
    descs = pack_descriptors([0] * len(shapes), out.prod(axis=1), ext, ptrs, sts)
    got = replay(descs, ext.shape[1], 2, memory)
    for i, arrs in enumerate(arrays):
        want = np.stack(np.broadcast_arrays(*arrs), axis=-1).reshape(-1, 2)
        np.testing.assert_array_equal(np.array(got[i]).reshape(-1, 2), want)


@pytest.mark.parametrize("seed", range(5))
def test_uniform_batches_get_the_general_descriptors(seed):
    """A batch whose inputs have one shape and strides each takes a memoised layout
    (``_uniform_layout`` / ``uniform_descriptors``): its table must be the general path's."""
    from dlpipe.kernels._batch import uniform_row
    from dlpipe.kernels.arithmetic import _uniform_layout, uniform_descriptors

    rng = np.random.default_rng(seed)
    n = 5
    full = [int(v) for v in rng.integers(1, 5, 3)]
    batches = []
    for r in (3, 1, 0, 3):
        shp = tuple(1 if rng.random() < 0.3 else v for v in full[3 - r :])
        st = tuple(int(v) for v in rng.integers(0, 9, r))
        if rng.random() < 0.5 and r:  # C-contiguous, so that dimensions merge
            st = tuple(int(np.prod(shp[d + 1 :])) for d in range(r))
        batches.append(_Batch([shp] * n, [st] * n))
    assert None not in [uniform_row(b) for b in batches]
    ptrs = [rng.integers(0, 2**40, n).astype(np.uint64) for _ in batches]
    out_ptrs = rng.integers(0, 2**40, n).astype(np.uint64)
    layout = _uniform_layout(tuple(uniform_row(b) for b in batches))
    out, strides = broadcast_batch(batches)
    ext, sts = merge_dims(out, strides)
    want = pack_descriptors(out_ptrs, out.prod(axis=1), ext, ptrs, sts)
    assert layout[0] == tuple(out[0]) and layout[3] == int(out[0].prod())
    assert layout[4] == ext.shape[1]
    np.testing.assert_array_equal(uniform_descriptors(layout, out_ptrs, ptrs), want)
    assert uniform_row(_Batch([(2, 3), (2, 4)], [(3, 1), (4, 1)])) is None
    assert _uniform_layout((((2, 3), (3, 1)), ((4, 3), (3, 1)))) is None  # no broadcast


@pytest.mark.parametrize("seed", range(4))
def test_ragged_inputs_of_one_c_shape_get_the_general_descriptors(seed):
    """Ragged inputs that all have the same C-contiguous shapes, no extent of 1 (NeMo's audio
    plus noise): ``_same_c_shapes`` takes them and ``flat_descriptors`` writes the table the
    general path (broadcast, merge, pack) makes; a strided input, an extent of 1 or shapes that
    differ go the general way."""
    from dlpipe.kernels.arithmetic import _same_c_shapes, flat_descriptors

    rng = np.random.default_rng(seed)
    n, ndim = 6, int(rng.integers(1, 4))
    shapes = [tuple(int(v) for v in rng.integers(2, 9, ndim)) for _ in range(n)]
    c = [tuple(int(np.prod(s[d + 1 :])) for d in range(ndim)) for s in shapes]
    batches = [_Batch(shapes, c) for _ in range(3)]
    got = _same_c_shapes(batches)
    assert got is not None
    ptrs = [rng.integers(0, 2**40, n).astype(np.uint64) for _ in batches]
    out_ptrs = rng.integers(0, 2**40, n).astype(np.uint64)
    out, strides = broadcast_batch(batches)
    ext, sts = merge_dims(out, strides)
    want = pack_descriptors(out_ptrs, out.prod(axis=1), ext, ptrs, sts)
    np.testing.assert_array_equal(flat_descriptors(out_ptrs, got.prod(axis=1), ptrs), want)
    strided = [tuple(2 * v for v in st) for st in c]
    assert _same_c_shapes([batches[0], _Batch(shapes, strided)]) is None
    ones = [(1, *s[1:]) for s in shapes]
    assert _same_c_shapes([_Batch(ones, c), _Batch(ones, c)]) is None
    other = [tuple(v + 1 for v in s) for s in shapes]
    assert _same_c_shapes([batches[0], _Batch(other, c)]) is None
