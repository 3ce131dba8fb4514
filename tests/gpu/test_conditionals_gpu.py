"""Conditionals with GPU operators in the branches: sub-batches, scatter and the zero-copy
merge, against the same graph on the CPU; a branch no sample takes; a CPU value merged with a
GPU one."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import fn, pipeline_def, types  # noqa: E402

N = 8
IMGS = [np.random.default_rng(i).integers(0, 255, (6 + i, 5, 3)).astype(np.uint8) for i in range(N)]
PS = [np.array(v) for v in [True, False, True, True, False, False, True, False]]


def run(graph, preds=PS):
    pipe = pipeline_def(graph, enable_conditionals=True, batch_size=N, num_threads=2,
                        device_id=0, seed=3)()  # fmt: skip
    outs = pipe.run()
    return [
        [np.asarray((o.as_cpu() if hasattr(o, "as_cpu") else o).at(i)) for i in range(N)]
        for o in outs
    ]


def sources(preds=PS):
    x = fn.external_source(source=lambda: IMGS, batch=True, layout="HWC")
    p = fn.external_source(source=lambda: preds, batch=True)
    return x, p


def graph_on(device):
    def graph():
        x, p = sources()
        y = x.gpu() if device == "gpu" else x
        if p:
            y = fn.flip(y, horizontal=1) * 2
            z = fn.cast(y, dtype=types.FLOAT)
        else:
            y = y[1:, :, ::-1] + 1
            z = fn.cast(y, dtype=types.FLOAT) / 2
        return y, z

    return graph


def test_branches_on_the_gpu_match_the_cpu():
    gy, gz = run(graph_on("gpu"))
    cy, cz = run(graph_on("cpu"))
    for i in range(N):
        np.testing.assert_array_equal(gy[i], cy[i])
        np.testing.assert_allclose(gz[i], cz[i])
        want = np.flip(IMGS[i], axis=1).astype(np.int32) * 2 if PS[i] else (
            IMGS[i][1:, :, ::-1].astype(np.int32) + 1)  # fmt: skip
        np.testing.assert_array_equal(cy[i], want)


def test_a_branch_no_sample_takes():
    none = [np.array(False)] * N

    def graph():
        x, p = sources(none)
        y = x.gpu()
        if p:
            y = y * 3
        else:
            y = y + 0
        return (y,)

    (ys,) = run(graph, none)
    for i in range(N):
        np.testing.assert_array_equal(ys[i], IMGS[i].astype(np.int32))


def test_cpu_value_merged_with_gpu_value():
    def graph():
        x, p = sources()
        if p:
            y = x.gpu() * 2
        else:
            y = x * 3  # stays on the CPU in its branch, moved to the GPU to merge
        return (y,)

    (ys,) = run(graph)
    for i in range(N):
        np.testing.assert_array_equal(ys[i], IMGS[i].astype(np.int32) * (2 if PS[i] else 3))


def test_nested_branch_no_sample_takes_is_merged():
    """The inner ``if``'s true branch is taken by none of the outer branch's samples (but by
    samples outside it): the inner merge still gives the outer branch's samples, and the
    outer merge a full batch (it used to come back empty, dropping the outer branch)."""
    ks = [np.array(v, np.int32) for v in [0, 5, 1, 2, 7, 9, 0, 6]]  # > 4 only where PS is False

    def graph():
        x, p = sources()
        k = fn.external_source(source=lambda: ks, batch=True)
        y = x.gpu()
        if p:
            if k > 4:
                y = y * 2
            else:
                y = y + 1
        else:
            y = fn.flip(y, horizontal=1) * 3
        return (y,)

    (ys,) = run(graph)
    for i in range(N):
        x = IMGS[i].astype(np.int32)
        want = x + 1 if PS[i] else np.flip(x, axis=1) * 3
        assert ys[i].dtype == np.int32
        np.testing.assert_array_equal(ys[i], want)
