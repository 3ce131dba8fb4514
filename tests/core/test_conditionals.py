"""Conditionals (@pipeline_def(enable_conditionals=True)): per-sample if/elif/else, nesting,
lazy and/or, not, returns in branches, merged structures and constants, masked execution (a
branch's operators see only its samples), DALI's errors; references computed per sample in
plain Python here."""

from __future__ import annotations

import numpy as np
import pytest

import dlpipe
from dlpipe import PipelineError, fn, pipeline_def, types
from dlpipe.pipeline import experimental

N = 8
XS = [np.arange(i % 4 + 1, dtype=np.int32) * (i + 1) for i in range(N)]  # lengths 1..4
PS = [np.array(v) for v in [True, False, True, True, False, False, True, False]]
KS = [np.array(i % 3, np.int32) for i in range(N)]


def run(func, threads=2, **kw):
    p = pipeline_def(func, enable_conditionals=True, batch_size=N, num_threads=threads,
                     device_id=None, seed=5, **kw)()  # fmt: skip
    return [[np.asarray(o.at(i)) for i in range(len(o))] for o in p.run()]


def sources():
    x = fn.external_source(source=lambda: XS, batch=True)
    p = fn.external_source(source=lambda: PS, batch=True)
    k = fn.external_source(source=lambda: KS, batch=True)
    return x, p, k


def test_if_elif_else_per_sample():
    def graph():
        x, p, k = sources()
        if k == 0:
            y = x * 10
        elif k == 1:
            y = x + 100
        else:
            y = -x
        return (y,)

    (ys,) = run(graph)
    for i in range(N):
        k = int(KS[i])
        want = XS[i] * 10 if k == 0 else (XS[i] + 100 if k == 1 else -XS[i])
        np.testing.assert_array_equal(ys[i], want)


def test_nested_ifs_and_values_defined_before():
    def graph():
        x, p, k = sources()
        y = x
        tag = fn.cast(k, dtype=types.INT32) * 0
        if p:
            if k > 0:
                y = x * 2
                tag = tag + 1
            else:
                tag = tag + 2
        else:
            tag = tag + 3
        return y, tag

    ys, tags = run(graph)
    for i in range(N):
        p, k = bool(PS[i]), int(KS[i])
        np.testing.assert_array_equal(ys[i], XS[i] * 2 if p and k > 0 else XS[i])
        assert int(tags[i]) == (1 if p and k > 0 else 2 if p else 3)


def test_branch_operators_only_see_their_samples():
    """x[3] is out of range for samples shorter than 4: only the branch that checked runs it."""

    def graph():
        x, p, k = sources()
        n = x.shape()[0]
        if n >= 4:
            y = x[3]
        else:
            y = x[0]
        return (y,)

    (ys,) = run(graph)
    for i in range(N):
        assert int(ys[i]) == (XS[i][3] if len(XS[i]) >= 4 else XS[i][0])


def test_lazy_and_or_and_not():
    def graph():
        x, p, k = sources()
        n = x.shape()[0]
        big = (n >= 4) and (x[3] > 10)  # x[3] only where n >= 4
        small = (n < 4) or (x[3] > 10)
        neg = not p
        both = p and k == 1 and n > 1
        return big, small, neg, both

    big, small, neg, both = run(graph)
    for i in range(N):
        n = len(XS[i])
        assert bool(big[i]) == (n >= 4 and XS[i][3] > 10)
        assert bool(small[i]) == (n < 4 or XS[i][3] > 10)
        assert bool(neg[i]) == (not PS[i]) and neg[i].dtype == np.bool_
        assert bool(both[i]) == bool(PS[i] and KS[i] == 1 and n > 1)


def test_python_conditions_still_run_as_python():
    def graph(flip=True):
        x, p, k = sources()
        if flip and 1 > 0:
            y = x * 2
        else:
            y = x * 3
        return (y,)

    (ys,) = run(graph)
    np.testing.assert_array_equal(ys[5], XS[5] * 2)


def test_variables_used_only_inside_a_branch_need_no_else():
    def graph():
        x, p, k = sources()
        if p:
            tmp = x * 3
            y = tmp + 1
        else:
            y = x
        return (y,)

    (ys,) = run(graph)
    for i in range(N):
        np.testing.assert_array_equal(ys[i], XS[i] * 3 + 1 if PS[i] else XS[i])


def test_returns_in_both_branches_and_early_return():
    def both_return():
        x, p, k = sources()
        if p:
            return (x + 1,)
        else:
            return (x - 1,)

    def early_return():
        x, p, k = sources()
        if p:
            return (x + 1,)
        y = x * 5
        return (y,)

    for graph, other in [(both_return, lambda a: a - 1), (early_return, lambda a: a * 5)]:
        (ys,) = run(graph)
        for i in range(N):
            np.testing.assert_array_equal(ys[i], XS[i] + 1 if PS[i] else other(XS[i]))


def test_structures_and_constants_are_merged():
    def graph():
        x, p, k = sources()
        if p:
            pair = (x, k)
            c = 7
            d = {"a": x[0]}
        else:
            pair = (x * 0, k + 10)
            c = x[0]
            d = {"a": k}
        return pair[0], pair[1], c, d["a"]

    a, b, c, d = run(graph)
    for i in range(N):
        p = bool(PS[i])
        np.testing.assert_array_equal(a[i], XS[i] if p else XS[i] * 0)
        assert int(b[i]) == (KS[i] if p else KS[i] + 10)
        assert int(c[i]) == (7 if p else XS[i][0])
        assert int(d[i]) == (XS[i][0] if p else KS[i])


class _Box:
    pass


def test_items_and_attributes_set_in_branches_are_merged():
    def graph():
        x, p, k = sources()
        outs = {}
        box = _Box()
        if p:
            outs["y"] = x * 2
            box.z = k + 1
        else:
            outs["y"] = x * 3
            box.z = k
        return outs["y"], box.z

    ys, zs = run(graph)
    for i in range(N):
        np.testing.assert_array_equal(ys[i], XS[i] * (2 if PS[i] else 3))
        assert int(zs[i]) == KS[i] + (1 if PS[i] else 0)


def test_random_numbers_do_not_depend_on_the_branch_or_threads():
    def graph():
        x, p, k = sources()
        u = fn.random.uniform(range=(0, 1))
        if p:
            y = u * 2
        else:
            y = u * 3
        return u, y

    for threads in (1, 2):
        u, y = run(graph, threads=threads)
        for i in range(N):
            assert float(y[i]) == pytest.approx(float(u[i]) * (2 if PS[i] else 3))
    assert [float(v) for v in run(graph, threads=1)[0]] == [float(v) for v in u]


def _helper(x, k):
    if k > 0:
        return x + 1000
    return x


def test_functions_called_from_the_pipeline_are_converted():
    def graph():
        x, p, k = sources()
        return (_helper(x, k),)

    (ys,) = run(graph)
    for i in range(N):
        np.testing.assert_array_equal(ys[i], XS[i] + 1000 if KS[i] > 0 else XS[i])


def test_experimental_pipeline_def_path():
    @experimental.pipeline_def(enable_conditionals=True, batch_size=N, num_threads=1,
                               device_id=None, debug=False)  # fmt: skip
    def graph():
        x, p, k = sources()
        if p:
            x = x + 1
        return x

    (out,) = graph().run()
    np.testing.assert_array_equal(out.at(0), XS[0] + 1)


def test_an_expression_is_not_fused_across_branches():
    def graph():
        x, p, k = sources()
        y = x * 2
        if p:
            y = y + 1
        return (y,)

    pipe = pipeline_def(graph, enable_conditionals=True, batch_size=N, num_threads=1,
                        device_id=None)()  # fmt: skip
    pipe.build()
    arith = [n for n in pipe._executor.cpu_ops if n.op.schema == "_arithmetic_generic_op"]
    assert len(arith) == 2 and arith[0].scope is None and arith[1].scope is not None
    (out,) = pipe.run()
    np.testing.assert_array_equal(out.at(0), XS[0] * 2 + 1)
    np.testing.assert_array_equal(out.at(1), XS[1] * 2)


# --- errors --------------------------------------------------------------------------------------


def test_variable_set_in_one_branch_only():
    def graph():
        x, p, k = sources()
        if p:
            y = x
        return (y,)

    with pytest.raises(RuntimeError, match="Variable 'y' must also be initialized in the `else`"):
        run(graph)


def test_divergent_structures():
    def graph():
        x, p, k = sources()
        if p:
            y = (x, x)
        else:
            y = x
        return (y[0],)

    with pytest.raises(ValueError, match="Divergent data found in different branches"):
        run(graph)


def test_divergent_types_at_run_time():
    def graph():
        x, p, k = sources()
        if p:
            y = x
        else:
            y = fn.cast(x, dtype=types.FLOAT)
        return (y,)

    with pytest.raises(PipelineError, match="variable 'y' is int32 .* float32"):
        run(graph)


def test_predicate_must_be_a_cpu_scalar():
    def non_scalar():
        x, p, k = sources()
        if x:
            x = x + 1
        return (x,)

    with pytest.raises(PipelineError, match=r"Conditions inside `if` statements are restricted "
                       r"to scalar \(0-d tensors\) inputs, that are placed on CPU. Got a 1-d"):  # fmt: skip
        run(non_scalar)

    def non_bool_and():
        x, p, k = sources()
        return (k and p,)

    with pytest.raises(PipelineError, match="Logical expression `and` is restricted to scalar .* "
                       "of `bool` type.* Got an input of type `int32` as the left"):  # fmt: skip
        run(non_bool_and)


def test_gpu_predicate_is_rejected():
    from dlpipe.graph import DataNode

    def graph():
        x, p, k = sources()
        gpu_p = DataNode("p_on_gpu", "gpu", None)  # as p.gpu() would give, without a GPU
        if gpu_p:
            x = x + 1
        return (x,)

    with pytest.raises(RuntimeError, match="Got a GPU input as a condition of the `if`"):
        run(graph)


def test_a_branch_value_used_outside_its_branch():
    def graph():
        x, p, k = sources()
        leaked = []
        if p:
            leaked.append(x * 2)
            y = x
        else:
            y = x
        return (leaked[0] + y,)

    with pytest.raises(PipelineError, match="produced inside a branch of an `if`"):
        run(graph)


def test_unsupported_return_position():
    def graph():
        x, p, k = sources()
        for _ in range(1):
            if p:
                break
        return (x,)

    with pytest.raises(TypeError, match="branches contain `break` is not supported"):
        run(graph)


def test_without_enable_conditionals_the_error_says_how():
    def graph():
        x, p, k = sources()
        if p:
            x = x + 1
        return x

    with pytest.raises(TypeError, match="enable_conditionals=True"):
        pipeline_def(graph, batch_size=N, num_threads=1, device_id=None)()
    assert dlpipe.pipeline_def is pipeline_def


def test_gpu_stage_runs_a_merge_whose_branch_no_sample_took():
    """The GPU stage's plan (``_gpu_branches.BranchPlan.samples``): an inner ``if`` whose true
    branch none of the outer branch's samples took still merges (its samples all come from the
    false branch); only the empty branch's operators are skipped; any other operator with an
    ABSENT input is an engine bug. (Whole graphs: tests/core/test_gpu_branches.py.)"""
    from dlpipe._conditionals import ABSENT
    from dlpipe._gpu_branches import BranchPlan

    def graph():
        x, p, k = sources()
        y = x
        if p:
            if k > 5:  # no sample
                y = x * 2
            else:
                y = x + 1
        return (y,)

    p = pipeline_def(graph, enable_conditionals=True, batch_size=N, num_threads=1,
                     device_id=None)()  # fmt: skip
    merges = [n for n in p._ops if n.op.schema == "_conditional_merge"]
    inner = next(n for n in merges if n.scope is not None)
    outer = next(n for n in merges if n.scope is None)
    preds = {1: [np.array(bool(v)) for v in PS], 2: [np.array(int(v) > 5) for v in KS]}
    values = {}
    s = inner.inputs[0].source.scope  # the inner true branch: both predicates
    while s is not None:
        values[s.predicate] = preds[s.depth]
        s = s.parent
    outer_true = [i for i in range(N) if PS[i]]
    plan = BranchPlan(values, N)
    doubled = inner.inputs[0].source  # x * 2, in the branch no sample took
    assert plan.samples(doubled, [XS]).tolist() == []
    assert plan.samples(inner, [ABSENT, XS]).tolist() == outer_true
    assert plan.samples(outer, [XS, XS]) is None
    with pytest.raises(RuntimeError, match="has no samples though 4 sample"):
        plan.samples(inner.inputs[1].source, [ABSENT])


def test_scope_mask_is_kept_while_the_predicates_lists_are_the_same():
    """``Scope.mask`` (asked by every CPU operator of a scope) is computed once per set of
    predicate value lists: reused while ``values`` holds the same lists, computed afresh for
    new ones (a new iteration, a skipped sample's replacement), of the outer or inner scope."""
    from dlpipe._conditionals import Scope
    from dlpipe.graph import DataNode

    def bools(*v):
        return [np.array(b) for b in v]

    p, q = DataNode("p", "cpu", None), DataNode("q", "cpu", None)
    outer = Scope(None, p, True)
    inner = Scope(outer, q, False)
    pv, qv = bools(True, True, False, True), bools(False, True, False, False)
    values = {p: pv, q: qv}
    m = inner.mask(values, 4)
    assert m.tolist() == [True, False, False, True]
    assert inner.mask(values, 4) is m
    assert inner.indices(values, 4) == [0, 3]
    assert outer.indices(values, 4) == [0, 1, 3]
    values = {p: bools(False, True, True, True), q: qv}  # a new list for the outer predicate
    assert inner.mask(values, 4).tolist() == [False, False, True, True]
    assert outer.indices(values, 4) == [1, 2, 3]
    values = {p: pv, q: bools(True, True, True, False)}  # a new list for the inner one
    assert inner.indices(values, 4) == [3]
    values = {p: [None, *pv[1:]], q: qv}  # None: the sample took no part
    assert inner.indices(values, 4) == [3]


def test_selections_match_the_scopes_and_compact_held_values():
    """The CPU stage's batch-level bookkeeping (``Selections``): each scope's samples as
    ``Scope.indices`` gives them; a scope's own ``Scattered`` output comes back as its part,
    an enclosing scope's as the part's rows for the nested scope, and a predicate held in a
    scope masks as its samples do (None: False)."""
    from dlpipe._conditionals import Scattered, Scope, Selections, predicate_mask
    from dlpipe.graph import DataNode, Rows

    p, q = DataNode("p", "cpu", None), DataNode("q", "cpu", None)
    outer = Scope(None, p, True)
    inner = Scope(outer, q, False)
    pv = Rows(
        [np.array(b) for b in (True, True, False, True, True)], np.array([1, 1, 0, 1, 1], bool)
    )
    held, held_rows = [0, 1, 3, 4], np.array([0, 1, 3, 4])
    q_part = np.array([False, True, False, True])
    qv = Scattered([q_part[0], q_part[1], None, q_part[2], q_part[3]], held, held_rows,
                   Rows(list(q_part), q_part))  # fmt: skip
    values = {p: pv, q: qv}
    assert predicate_mask(qv, 5).tolist() == [False, True, False, False, True]
    sel = Selections()
    for scope in (outer, inner):
        idx, rows = sel.of(scope, values, 5)
        assert idx == scope.indices(values, 5) == rows.tolist()
        assert sel.of(scope, values, 5)[0] is idx  # the same objects all iteration
    assert sel.of(inner, values, 5)[0] == [0, 3]
    idx, rows = sel.of(outer, values, 5)
    data = np.array([10.0, 11.0, 13.0, 14.0], np.float32)
    x = Scattered([data[0], data[1], None, data[2], data[3]], idx, rows, Rows(list(data), data))
    assert sel.compact(x, outer) is x.part
    got = sel.compact(x, inner)
    assert isinstance(got, Rows) and got.array.tolist() == [10.0, 13.0] == [float(v) for v in got]
    sel.clear()
    assert sel.of(inner, values, 5)[0] == [0, 3]


def test_batch_level_values_in_nested_branches_equal_the_per_sample_math():
    """Random numbers, a constant table subscripted by them and arithmetic, in an ``if``
    nested in another: the batch-level path (each scope's outputs kept as one array and
    passed on) gives the values computed per sample."""

    @pipeline_def(enable_conditionals=True, batch_size=32, num_threads=1, device_id=None, seed=5)
    def pipe():
        u = fn.random.uniform(range=[0, 1])
        k = fn.random.uniform(values=[0, 1, 2, 3], dtype=types.INT32)
        table = types.Constant(np.array([10.0, 20.0, 30.0, 40.0], np.float32))
        y = u * 0
        if u > 0.3:
            m = table[k] * u
            if k > 1:
                y = m + u * 2
            else:
                y = m - 1
        else:
            y = u + 5
        return u, k, y

    p = pipe()
    p.build()
    levels = [bl for bl, nodes in p._executor._segments for n in nodes if n.scope is not None]
    assert levels and all(levels)
    table = np.array([10.0, 20.0, 30.0, 40.0], np.float32)
    for _ in range(3):
        u, k, y = (np.array([np.asarray(s) for s in out]) for out in p.run())
        m = table[k] * u
        want = np.where(u > 0.3, np.where(k > 1, m + u * np.float32(2), m - np.float32(1)),
                        u + np.float32(5))  # fmt: skip
        np.testing.assert_allclose(y, want, rtol=1e-6)
        assert y.dtype == np.float32
