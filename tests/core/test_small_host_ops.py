"""Operators over small host data run batch-wise (operators/_small.py): the same values and
errors as per sample, and only where every input is known small."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import fn, pipeline_def, types
from dlpipe.errors import PipelineError
from dlpipe.operators.conditional_validate import ConditionalValidate

BATCH = 16


def _batch_level(pipe) -> dict[str, list[bool]]:
    """schema -> [batch-level?] of each CPU node, as the executor split them."""
    out: dict[str, list[bool]] = {}
    for batch_level, nodes in pipe._executor._segments:
        for node in nodes:
            out.setdefault(node.op.schema, []).append(batch_level)
    return out


def _run(pipe) -> list[np.ndarray]:
    pipe.build()
    return [np.stack([np.asarray(s) for s in out]) for out in pipe.run()]


def test_arithmetic_over_random_numbers_is_batch_level_and_exact():
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, seed=3)
    def pipe():
        a = fn.random.uniform(range=[-5, 5], shape=(3,))
        b = fn.random.uniform(range=[-5, 5])
        k = fn.random.uniform(values=[-7, -3, 0, 4, 9], dtype=types.INT32)
        d = fn.random.uniform(values=[-2, 0, 3], dtype=types.INT32)
        return a, b, k, d, a * b + 1, a > b, k // d, k % d, (k + 0.5) * a, k / d

    p = pipe()
    a, b, k, d, ab, gt, div, mod, mixed, fdiv = _run(p)
    levels = _batch_level(p)
    assert all(levels["_arithmetic_generic_op"]) and len(levels["_arithmetic_generic_op"]) >= 4
    np.testing.assert_array_equal(ab, (a * b[:, None] + np.float32(1)).astype(np.float32))
    assert ab.dtype == np.float32 and ab.shape == (BATCH, 3)
    np.testing.assert_array_equal(gt, a > b[:, None])
    assert gt.dtype == np.bool_
    # integer division and remainder as C does them (towards zero), 0 where dividing by 0
    safe = np.where(d == 0, 1, d)
    want_div = np.where(d == 0, 0, np.trunc(k / safe)).astype(np.int32)
    want_mod = np.where(d == 0, 0, np.fmod(k, safe)).astype(np.int32)
    np.testing.assert_array_equal(div, want_div)
    np.testing.assert_array_equal(mod, want_mod)
    assert div.dtype == np.int32 and div.shape == (BATCH,)
    np.testing.assert_allclose(mixed, (k[:, None] + 0.5) * a, rtol=1e-6)
    assert mixed.dtype == np.float32
    with np.errstate(all="ignore"):  # true division of integers: float32, inf and nan at 0
        np.testing.assert_array_equal(fdiv, k.astype(np.float32) / d.astype(np.float32))
    assert fdiv.dtype == np.float32


def test_arithmetic_on_external_data_stays_per_sample():
    rng = np.random.default_rng(0)
    data = [rng.random((4, 5), dtype=np.float32) for _ in range(BATCH)]

    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None)
    def pipe():
        x = fn.external_source(source=lambda: data, batch=True)
        return x * 2 + fn.random.uniform(range=[0, 1])

    p = pipe()
    (out,) = _run(p)
    assert _batch_level(p)["_arithmetic_generic_op"] == [False]
    assert out.shape == (BATCH, 4, 5)


def test_subscripts_of_a_constant_table_by_a_random_index():
    table = np.arange(24, dtype=np.int32).reshape(6, 4)

    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, seed=5)
    def pipe():
        t = types.Constant(table)
        i = fn.random.uniform(values=[0, 2, 5, -1, -6], dtype=types.INT32)
        return i, t[i], t[i, 2], t[-2], t[1:3]  # the last one: a slice (per-sample path)

    p = pipe()
    i, rows, cells, second_last, sliced = _run(p)
    assert all(_batch_level(p)["tensor_subscript"])
    np.testing.assert_array_equal(rows, table[i])
    np.testing.assert_array_equal(cells, table[i, 2])
    np.testing.assert_array_equal(second_last, np.broadcast_to(table[-2], (BATCH, 4)))
    np.testing.assert_array_equal(sliced, np.broadcast_to(table[1:3], (BATCH, 2, 4)))
    assert rows.dtype == np.int32 and rows.shape == (BATCH, 4) and cells.shape == (BATCH,)


def test_an_index_out_of_range_names_the_subscript_and_the_shape():
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, seed=5)
    def pipe():
        t = types.Constant(np.zeros((6, 4), np.float32))
        i = fn.random.uniform(values=[0, 6], dtype=types.INT32)
        return t[i]

    p = pipe()
    p.build()
    with pytest.raises(PipelineError, match=r"Index 6 is out of range for axis 0 of length 6"):
        p.run()


@pytest.mark.parametrize(
    ("name", "side", "value", "error", "message"),
    [
        ("and", "left", np.int32(1), TypeError, "Got an input of type `int32`"),
        ("if", "", np.zeros(2, np.float32), ValueError, "Got a 1-d input"),
    ],
)
def test_predicates_checked_batch_wise_raise_the_per_sample_errors(
    name, side, value, error, message
):
    op = ConditionalValidate(expression_name=name, expression_side=side)
    good = [np.bool_(i % 2) for i in range(5)]
    out = op.run_batch_cpu([good], {}, [None] * 5)[0]
    np.testing.assert_array_equal(np.asarray(out), [False, True, False, True, False])
    samples = [*good[:3], value, good[3]]
    with pytest.raises(error, match=message) as info:
        op.run_batch_cpu([samples], {}, [None] * 5)
    assert info.value.sample_index == 3


def test_if_on_integer_predicates_batch_wise():
    op = ConditionalValidate(expression_name="if")
    out = op.run_batch_cpu([[np.int32(v) for v in (0, 3, -1, 0)]], {}, [None] * 4)[0]
    np.testing.assert_array_equal(np.asarray(out), [False, True, True, False])
    assert np.asarray(out).dtype == np.bool_
