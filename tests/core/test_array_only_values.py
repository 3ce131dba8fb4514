"""The CPU stage's array-only values (``Executor._arrays_only``): outputs of batch-level
operators that only whole-array readers take are kept as one array (``graph.Batch``,
``_conditionals.Held``) instead of per-sample lists, and a constant of such outputs is made
once per batch size. The outputs must be those of the per-sample lists (the executor with
no array-only values), sample by sample and iteration by iteration."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import fn, pipeline_def, types
from dlpipe._conditionals import Held, predicate_mask
from dlpipe.executor import Executor

N = 16


def _graph():
    u = fn.random.uniform(range=[0, 4], dtype=types.INT32)  # (rounded: 0..4)
    c = fn.random.coin_flip(probability=0.5)
    v = fn.random.uniform(range=[-1.0, 1.0])
    table = fn.constant(fdata=[0.5, 1.5, 2.5, 3.5, 4.5])
    if c:
        mag = table[u] * 2.0
        if mag > 3.0:
            mag = -mag
        m = fn.transforms.rotation(angle=mag * 10.0)  # (per sample: reads its args as x[i])
    else:
        mag = table[u] + v
        m = fn.transforms.shear(shear=fn.stack(mag, mag * 0.5))
    return m, mag, u, c


def _run(iterations: int) -> tuple[list, Executor]:
    pipe = pipeline_def(_graph, enable_conditionals=True, batch_size=N, num_threads=1,
                        device_id=None, seed=11)()  # fmt: skip
    pipe.build()
    outs = [
        [[np.asarray(o.at(i)) for i in range(N)] for o in pipe.run()] for _ in range(iterations)
    ]
    return outs, pipe._executor


def test_array_only_outputs_equal_the_per_sample_lists(monkeypatch):
    got, ex = _run(3)
    assert ex._array_only  # (the graph has such values: the test covers them)
    assert ex._kept  # the table, made once and kept
    for kept in ex._kept.values():
        assert all(not v.array.flags.writeable for v in kept)
    monkeypatch.setattr(Executor, "_arrays_only", lambda self: frozenset())
    want, ex = _run(3)
    assert not ex._array_only and not ex._kept
    for it_got, it_want in zip(got, want, strict=True):
        for out_got, out_want in zip(it_got, it_want, strict=True):
            for a, b in zip(out_got, out_want, strict=True):
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)


def test_held_reads_as_its_scattered_list():
    array = np.array([True, False, True])
    rows = np.array([1, 4, 5])
    held = Held(array, rows.tolist(), rows, 6)
    assert len(held) == 6
    assert [None if v is None else bool(v) for v in held] == [None, True, None, None, False, True]
    assert held[4] is not None and not held[4] and held[0] is None
    assert [None if v is None else bool(v) for v in held.take([5, 0])] == [True, None]
    np.testing.assert_array_equal(predicate_mask(held, 6), [0, 1, 0, 0, 0, 1])


def test_random_draws_read_per_sample():
    pipe = pipeline_def(lambda: fn.random.uniform(range=[0.0, 1.0]), batch_size=4,
                        num_threads=1, device_id=None, seed=3)()  # fmt: skip
    pipe.build()
    op = pipe._executor.cpu_ops[0].op
    draws = op.batch_params(4)
    pairs = list(draws)
    assert len(draws) == 4 and [draws[i] for i in range(4)] == pairs
    assert draws[1:3] == pairs[1:3] and draws.take([3, 0]) == [pairs[3], pairs[0]]
    assert all(float(p[0]) == float(x) for p, x in zip(pairs, draws.pre, strict=True))
    with pytest.raises(IndexError):
        draws[4]
