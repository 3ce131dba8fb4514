"""The GPU stage's compact branches (``_gpu_branches.py``) and the SampleList paths they use
(``take``, ``of_arrays``, ``from_dense``, the interleaving merge), against the CPU and numpy:
random predicates that change every iteration, nested ifs, branches that no sample takes, ragged
samples, an output read outside the ``if``."""

from __future__ import annotations

import gc

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import fn, pipeline_def, types  # noqa: E402

N = 16
IMGS = [np.random.default_rng(i).integers(0, 255, (5 + i % 4, 4 + i % 3, 3)).astype(np.uint8)
        for i in range(N)]  # fmt: skip


def _graph(device):
    def graph():
        x = fn.external_source(source=lambda: IMGS, batch=True, layout="HWC")
        p = fn.random.coin_flip(probability=0.5, seed=3)
        k = fn.random.uniform(values=[0, 1, 2, 3], dtype=types.INT32, seed=4)
        y = x.gpu() if device == "gpu" else x
        before = y * 1  # read after the if, outside it
        if p:
            y = fn.flip(y, horizontal=1)
            if k > 9:  # no sample ever
                y = fn.cast(y * 2, dtype=types.INT32)
            elif k == 1 or k == 3:
                y = fn.cast(y + k, dtype=types.INT32)
                if k == 3:
                    y = y // 2
                else:
                    y = y * 5
            else:
                y = fn.cast(y - 1, dtype=types.INT32)
        else:
            y = fn.cast(y, dtype=types.INT32) * 3
        if k == 0:
            z = fn.cast(y, dtype=types.FLOAT) / 2
        else:
            z = fn.cast(y, dtype=types.FLOAT)
        return y, z, before, p, k

    return graph


def _run(device, iterations):
    pipe = pipeline_def(_graph(device), enable_conditionals=True, batch_size=N, num_threads=2,
                        device_id=0 if device == "gpu" else None, seed=7)()  # fmt: skip
    out = []
    for _ in range(iterations):
        batch = []
        for o in pipe.run():
            o = o.as_cpu() if hasattr(o, "as_cpu") else o
            batch.append([np.asarray(o.at(i)) for i in range(N)])
        out.append(batch)
    return out


def test_nested_random_branches_match_the_cpu():
    gpu, cpu = _run("gpu", 4), _run("cpu", 4)
    taken = set()
    for g, c in zip(gpu, cpu, strict=True):
        for a, b in zip(g[3:], c[3:], strict=True):  # the predicates: the same draws
            assert [int(v) for v in a] == [int(v) for v in b]
        for i in range(N):
            taken.add((bool(g[3][i]), int(g[4][i])))
            for a, b in zip(g[:3], c[:3], strict=True):
                assert a[i].dtype == b[i].dtype and a[i].shape == b[i].shape
                np.testing.assert_array_equal(a[i], b[i])
            x = IMGS[i]
            np.testing.assert_array_equal(g[2][i], x)
    assert len(taken) >= 6  # both sides of the outer if, and every inner branch but the empty one


def test_take_and_merge_keep_memory_and_values():
    from dlpipe._gpu_branches import merge_gpu
    from dlpipe.tensors_gpu import SampleList

    arrays = [cupy.asarray(x) for x in IMGS]
    src = SampleList.from_arrays(arrays)
    taken = src.take(np.array([3, 0, 3, 7]))
    dense = SampleList.from_dense(cupy.arange(N * 6, dtype=cupy.float32).reshape(N, 2, 3))
    del arrays, src
    gc.collect()
    cupy.zeros(1 << 24, np.uint8)  # reuse freed memory if the samples were not kept alive
    for k, i in enumerate([3, 0, 3, 7]):
        np.testing.assert_array_equal(cupy.asnumpy(taken[k]), IMGS[i])
    pred = np.array([i % 3 == 0 for i in range(4)])
    t = taken.take(np.flatnonzero(pred))
    f = SampleList.from_arrays([cupy.asarray(IMGS[i]) for i in range(int((~pred).sum()))])
    merged = merge_gpu(t, f, pred)
    ti, fi = iter(range(len(t))), iter(range(len(f)))
    for i, p in enumerate(pred):
        want = cupy.asnumpy(t[next(ti)]) if p else IMGS[next(fi)]
        np.testing.assert_array_equal(cupy.asnumpy(merged[i]), want)
    d = dense.take(np.array([5, 1]))
    np.testing.assert_array_equal(
        cupy.asnumpy(d[0]), np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)[5]
    )


def test_from_dense_strided_and_contiguous():
    from dlpipe.tensors_gpu import SampleList

    base = cupy.arange(4 * 5 * 6, dtype=cupy.int16).reshape(4, 5, 6)
    s = SampleList.from_dense(base)
    assert s.dense is base and int(s.ptrs[2]) == base.data.ptr + 2 * 5 * 6 * 2
    assert s.shapes.tolist() == [[5, 6]] * 4 and s.strides.tolist() == [[6, 1]] * 4
    view = base[:, ::2, 1:]
    s = SampleList.from_dense(view)
    assert s.dense.flags.c_contiguous and s.shapes.tolist() == [[3, 5]] * 4
    assert s.strides.tolist() == [[5, 1]] * 4
    for i in range(4):
        np.testing.assert_array_equal(cupy.asnumpy(s[i]), cupy.asnumpy(view[i]))
    flat = SampleList.from_dense(cupy.arange(3, dtype=cupy.float32))
    assert flat.shapes.shape == (3, 0) and float(flat[2]) == 2.0
