"""The GPU stage's conditional bookkeeping (``_gpu_branches.py``) on the CPU: masks and
positions against per-sample loops, the interleaving merge and the scatter against loops, and
whole graphs (the automatic augmentations, nested ifs, empty branches, CPU values merged with
GPU ones, skipped samples) replayed with host stand-ins for GPU batches: every output sample
must be the one a per-sample walk of the graph gives."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import executor_gpu, fn, pipeline_def, types
from dlpipe._conditionals import ABSENT, Absent, Scattered, predicate_mask
from dlpipe._gpu_branches import BranchPlan, held_in, merge_gpu, scatter_gpu
from dlpipe.graph import Rows, Skipped

GpuStage = executor_gpu.GpuStage  # (the builds below replace it with _NoGpuStage)


class HostSamples:
    """A stand-in for ``tensors_gpu.SampleList``: the same attributes, host arrays, and a
    ``ptrs`` entry per sample that names what the sample is."""

    def __init__(self, dtype, ptrs, shapes, strides, owners=None, device_id=0):
        self.dtype = np.dtype(dtype)
        self.ptrs = np.asarray(ptrs, np.uint64)
        self.shapes = np.asarray(shapes, np.int64)
        self.strides = np.asarray(strides, np.int64)
        assert self.shapes.shape == self.strides.shape == (len(self.ptrs), self.shapes.shape[1])
        self.owners = owners
        self.device_id = device_id

    @classmethod
    def of_arrays(cls, dtype, ptrs, shapes, strides, owners, device_id, dense=None):
        return cls(dtype, ptrs, shapes, strides, owners, device_id)

    @classmethod
    def ids(cls, ids, dtype=np.uint8):
        ids = np.asarray(ids, np.uint64)
        shapes = np.stack([ids % 5 + 1, ids % 3 + 1], axis=1).astype(np.int64)
        return cls(dtype, ids, shapes, shapes[:, ::-1] * 7, owners=["o"] * len(ids))

    @staticmethod
    def coerce(x):
        assert isinstance(x, HostSamples)
        return x

    def take(self, pos):
        pos = np.asarray(pos, np.int64)
        return HostSamples(self.dtype, self.ptrs[pos], self.shapes[pos], self.strides[pos],
                           (self.owners,), self.device_id)  # fmt: skip

    def __len__(self):
        return len(self.ptrs)


# --- merge and scatter against loops ---------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_merge_interleaves_the_branches_in_batch_order(seed):
    rng = np.random.default_rng(seed)
    pred = rng.random(11) < 0.5
    pred[0], pred[1] = True, False  # both branches taken
    t = HostSamples.ids(100 + np.arange(pred.sum()))
    f = HostSamples.ids(200 + np.arange((~pred).sum()))
    out = merge_gpu(t, f, pred)
    ti, fi = iter(range(len(t))), iter(range(len(f)))
    for i, p in enumerate(pred):
        src, k = (t, next(ti)) if p else (f, next(fi))
        assert out.ptrs[i] == src.ptrs[k]
        assert out.shapes[i].tolist() == src.shapes[k].tolist()
        assert out.strides[i].tolist() == src.strides[k].tolist()
    assert out.ptrs.dtype == np.uint64 and out.shapes.dtype == np.int64
    assert not isinstance(out.owners, list)  # one owner for the batch (no per-sample list)
    assert out.owners[0] == (t.owners,) and out.owners[1] == (f.owners,)


def test_merge_with_one_branch_taken_or_absent():
    t = HostSamples.ids([1, 2, 3])
    assert merge_gpu(t, ABSENT, np.ones(3, bool)) is t
    assert merge_gpu(ABSENT, t, np.zeros(3, bool)) is t
    empty = HostSamples.ids([])
    assert merge_gpu(t, empty, np.ones(3, bool)) is t
    with pytest.raises(RuntimeError, match="produced no samples"):
        merge_gpu(ABSENT, t, np.array([True, False, False]))
    with pytest.raises(RuntimeError, match="2 and 1 samples chose the branches, which hold 3 "):
        merge_gpu(t, t, np.array([True, True, False]))
    with pytest.raises(TypeError, match="uint8 and float32"):
        f = HostSamples.ids([9], np.float32)
        merge_gpu(HostSamples.ids([1, 2]), f, np.array([True, False, True]))


def test_scatter_puts_samples_at_their_positions():
    out = HostSamples.ids([7, 8, 9])
    full = scatter_gpu(out, np.array([1, 4, 5]), 6)
    assert full.ptrs.tolist() == [0, 7, 0, 0, 8, 9]
    for k, i in enumerate([1, 4, 5]):
        assert full.shapes[i].tolist() == out.shapes[k].tolist()
        assert full.strides[i].tolist() == out.strides[k].tolist()
    assert full.shapes[0].tolist() == [0, 0]
    assert full.owners == (out.owners,)


# --- masks and positions against per-sample loops ------------------------------------------


def _nested_graph():
    """Nested ifs (a branch no sample takes at depth 2), built on the CPU; the scopes and the
    predicates' values of one iteration."""
    ps = [np.array(v) for v in [True, False, True, True, False, False, True, False]]
    ks = [np.array(i % 3, np.int32) for i in range(8)]

    def graph():
        p = fn.external_source(source=lambda: ps, batch=True)
        k = fn.external_source(source=lambda: ks, batch=True)
        y = k
        if p:
            if k > 5:  # no sample
                y = k * 2
            elif k == 1:
                y = k + 1
            else:
                y = k - 1
        else:
            y = k * 3
        return (y,)

    pipe = pipeline_def(graph, enable_conditionals=True, batch_size=8, num_threads=1,
                        device_id=None, seed=1)()  # fmt: skip
    pipe.build()
    ws = pipe._executor._run_cpu_stage()
    scopes = {id(n.scope): n.scope for n in pipe._ops if n.scope is not None}
    return list(scopes.values()), ws


def test_rows_and_positions_match_per_sample_selection():
    scopes, ws = _nested_graph()
    n = ws.batch_size
    plan = BranchPlan(ws.values, n)
    assert max(s.depth for s in scopes) >= 3
    empty = 0
    for s in scopes:
        want = [i for i in range(n) if s.selects(ws.values, i)]
        rows = plan.rows(s)
        got = list(range(n)) if rows is None else rows.tolist()
        assert got == want
        assert plan.count(s) == len(want)
        assert s.indices(ws.values, n) == want  # Scope.indices (the CPU stage's batch path)
        empty += not want
        for holder in scopes + [None]:
            held = list(range(n)) if holder is None else holder.indices(ws.values, n)
            if not set(want) <= set(held):
                if want:
                    with pytest.raises(RuntimeError, match="read from a value"):
                        plan.positions(s, holder)
                continue
            pos = plan.positions(s, holder)
            got = list(range(len(held))) if pos is None else pos.tolist()
            assert [held[j] for j in got] == want
    assert empty > 0


@pytest.mark.parametrize("dtype", [bool, np.int32, np.float32])
def test_predicate_mask_of_every_form_is_the_samples_truth(dtype):
    """predicate_mask (as the GPU stage reads it) reads a Rows' or a Scattered value's array where there is one and the
    0-d samples otherwise: every form gives each sample's truth (None: False)."""
    rng = np.random.default_rng(3)
    n = 12
    values = rng.integers(0, 3, n).astype(dtype)
    if dtype is np.float32:
        values[1], values[2] = np.nan, -0.0
    samples = [np.asarray(v) for v in values]
    rows = np.flatnonzero(rng.random(n) < 0.6)
    part = Rows([samples[i] for i in rows], values[rows])
    scattered = Scattered([samples[i] if i in set(rows.tolist()) else None for i in range(n)],
                          rows.tolist(), rows, part)  # fmt: skip
    flat = Scattered(list(scattered), rows.tolist(), rows, Rows(list(part), values[rows, None]))
    for form in (samples, Rows(samples, values), scattered, flat, list(scattered)):
        want = [v is not None and bool(v) for v in form]
        got = predicate_mask(form, n)
        assert got.dtype == bool and got.tolist() == want


def test_bring_takes_cpu_lists_and_gpu_values_over_the_scope():
    scopes, ws = _nested_graph()
    plan = BranchPlan(ws.values, ws.batch_size)
    inner = max(scopes, key=lambda s: (s.depth, plan.count(s)))
    want = inner.indices(ws.values, ws.batch_size)

    class Node:  # a CPU node's output: held whole
        source = None

    values = list("abcdefgh")
    assert plan.bring(Node(), values, inner) == [values[i] for i in want]
    gpu = HostSamples.ids(np.arange(8) + 1)
    assert plan.bring(Node(), gpu, inner).ptrs.tolist() == [i + 1 for i in want]
    assert plan.bring(Node(), ABSENT, inner) is ABSENT
    assert plan.bring(Node(), None, inner) is None


# --- whole graphs replayed with stand-ins ----------------------------------------------------


class _NoGpuStage:
    """Replaces GpuStage at build time: the graph's GPU nodes are replayed by the test."""

    lanes = 0
    profiler = None

    def __init__(self, device_id, gpu_ops, outputs, layouts, lanes=0, num_threads=0):
        self.ops = list(gpu_ops)


def _build(graph, monkeypatch, batch=16):
    monkeypatch.setattr(executor_gpu, "GpuStage", _NoGpuStage)
    pipe = pipeline_def(graph, enable_conditionals=True, batch_size=batch, num_threads=1,
                        device_id=0, seed=2, exec_async=False, exec_pipelined=False)()  # fmt: skip
    pipe.build()
    return pipe


def _cpu_key(v):
    if v is None:
        return None
    a = np.asarray(v)
    return (a.dtype.str, a.shape, a.tobytes())


class _Ids:
    """Names (ints) for what a sample is: an operator applied to named inputs."""

    def __init__(self):
        self.table: dict = {}

    def __call__(self, key) -> int:
        return self.table.setdefault(key, len(self.table) + 1)


def _key(node, j, gpu_ins, cpu_ins, param, with_params):
    return (node.name, j, tuple(gpu_ins), tuple(cpu_ins), repr(param) if with_params else None)


def _reference(ops, values, params, n, ids, with_params=True) -> dict:
    """Per sample, each GPU node's output name: the graph walked sample by sample."""
    got: dict = {}
    for i in range(n):
        val: dict = {}
        for node in ops:
            if node.scope is not None and not node.scope.selects(values, i):
                continue
            if node.op.schema == "_conditional_merge":
                pred = bool(values[node.arg_nodes["predicate"]][i])
                val[node.outputs[0]] = val[node.inputs[0 if pred else 1]]
                continue
            gpu_ins = [val[x] for x in node.inputs if x.device != "cpu"]
            cpu_ins = [_cpu_key(values[x][i]) for x in node.inputs if x.device == "cpu"]
            cpu_ins += [_cpu_key(values[x][i]) for _, x in sorted(node.arg_nodes.items())]
            p = params[node][i] if params.get(node) is not None else None
            for j, dn in enumerate(node.outputs):
                val[dn] = ids(_key(node, j, gpu_ins, cpu_ins, p, with_params))
        for dn, v in val.items():
            got.setdefault(dn, {})[i] = v
    return got


def _model_op(node, ids, with_params, skip: list):
    """A stand-in for ``node.op.run_batch``: each output sample named after the operator and
    the sample's inputs; with ``skip`` = [True], the first sample is dropped (once)."""

    def run_batch(inputs, args, params, stream):
        m = len(next(v for v in (*inputs, *args.values(), params) if v is not None))
        for v in inputs:
            assert v is not None and not isinstance(v, Absent) and len(v) == m, node.name
        outs = []
        for j in range(len(node.outputs)):
            names = []
            for k in range(m):
                gpu_ins, cpu_ins = [], []
                for x, v in zip(node.inputs, inputs, strict=True):
                    if x.device == "cpu":
                        cpu_ins.append(_cpu_key(v[k]))
                    else:
                        gpu_ins.append(int(v.ptrs[k]))
                cpu_ins += [_cpu_key(args[a][k]) for a in sorted(args)]
                p = params[k] if params is not None else None
                names.append(ids(_key(node, j, gpu_ins, cpu_ins, p, with_params)))
            outs.append(HostSamples.ids(names))
        outs = outs[0] if len(outs) == 1 else tuple(outs)
        if skip and skip.pop():
            return Skipped(outs, {0: "dropped"})
        return outs

    return run_batch


def _replay(ops, ws, ids, monkeypatch, skip_at=None, with_params=True):
    """The GPU stage's own loop (``GpuStage._run_ops``) over the nodes, with stand-in
    batches and operators (merges run as they are); ``skip_at`` (a node) drops the first
    sample it runs on, as ``on_error="skip"`` does. Returns the whole outputs' plan."""
    stage = GpuStage.__new__(GpuStage)
    stage._serial, stage.profiler, stage._SampleList = {}, None, HostSamples
    for node in ops:
        if node.op.schema != "_conditional_merge":
            skip = [True] if node is skip_at else []
            monkeypatch.setattr(node.op, "run_batch", _model_op(node, ids, with_params, skip))
    stage._run_ops(ops, ws, None)
    plan = BranchPlan(ws.values, ws.batch_size)
    for node in ops:  # the plan's invariant
        for dn in node.outputs:
            v = ws.values[dn]
            assert isinstance(v, Absent) or len(v) == plan.count(held_in(dn)), node.name
    return plan


def _check_graph(graph, monkeypatch, iterations=2, skip=False):
    pipe = _build(graph, monkeypatch)
    ops = pipe._executor.gpu_stage.ops
    assert ops and any(n.scope is not None for n in ops)
    outs = [x for x in pipe._executor.outputs if x.device == "gpu"]
    empty = 0
    for it in range(iterations):
        ws = pipe._executor._run_cpu_stage()
        n = ws.batch_size
        ids = _Ids()
        ref = _reference(ops, ws.values, ws.params, n, ids, with_params=not skip)
        plan = BranchPlan(ws.values, n)
        empty += sum(not plan.count(x.scope) for x in ops)
        skip_at, source = None, list(range(n))
        if skip:  # an operator in a branch that some sample took, iteration by iteration (not
            # a merge: merges run as they are, and drop nothing)
            inside = [
                x
                for x in ops
                if x.scope is not None
                and plan.count(x.scope)
                and x.op.schema != "_conditional_merge"
            ]
            skip_at = inside[it % len(inside)]
            s = int(plan.rows(skip_at.scope)[0])  # the operator's first sample
            source[s] = min((g for g in range(n) if g != s), key=lambda g: (abs(g - s), g))
        plan = _replay(ops, ws, ids, monkeypatch, skip_at, with_params=not skip)
        for dn in outs:
            whole = plan.whole(dn, ws.values[dn])
            assert whole.ptrs.tolist() == [ref[dn][source[i]] for i in range(n)]
    return empty


def _augmented(kind):
    rng = np.random.default_rng(5)
    imgs = [rng.integers(0, 256, (8, 8, 3)).astype(np.uint8) for _ in range(16)]

    def graph():
        from dlpipe.auto_aug import auto_augment, rand_augment, trivial_augment

        x = fn.external_source(source=lambda: imgs, layout="HWC").gpu()
        if kind == "auto_augment":
            return auto_augment.auto_augment_image_net(x, shape=[8, 8], seed=11)
        if kind == "rand_augment":
            return rand_augment.rand_augment(x, n=2, m=12, seed=11)
        return trivial_augment.trivial_augment_wide(x, shape=[8, 8], seed=11)

    return graph


@pytest.mark.parametrize("kind", ["auto_augment", "rand_augment", "trivial_augment"])
def test_automatic_augmentations_replayed(kind, monkeypatch):
    assert _check_graph(_augmented(kind), monkeypatch) > 0  # empty branches occur


def _hand_graph():
    n = 16
    xs = [np.full((2 + i % 3, 3), i, np.uint8) for i in range(n)]
    ps = [np.array(v) for v in np.random.default_rng(3).random(n) < 0.5]
    ks = [np.array(i % 4, np.int32) for i in range(n)]

    def graph():
        x = fn.external_source(source=lambda: xs, batch=True, layout="HW")
        p = fn.external_source(source=lambda: ps, batch=True)
        k = fn.external_source(source=lambda: ks, batch=True)
        g = x.gpu()
        c = x  # a CPU value merged with a GPU one: moved to the GPU in its branch
        if p:
            y = fn.flip(g, horizontal=1)
            if k > 9:  # no sample
                y = y * 2
            elif k == 1 or k == 3:
                y = y + k  # a CPU operand
                if k == 3:
                    y = fn.cast(y, dtype=types.UINT8)
                else:
                    y = fn.cast(g, dtype=types.UINT8)
            else:
                y = fn.cast(y - 1, dtype=types.UINT8)
            z = y
        else:
            y = g
            z = c
        if k == 0:
            w = fn.cast(z * 3, dtype=types.UINT8)
        else:
            w = z
        return y, w

    return graph


def test_nested_ifs_empty_branches_and_cpu_values_replayed(monkeypatch):
    assert _check_graph(_hand_graph(), monkeypatch, iterations=3) > 0


@pytest.mark.parametrize("graph", [_hand_graph, lambda: _augmented("trivial_augment")])
def test_a_sample_skipped_in_a_branch_is_replaced(graph, monkeypatch):
    _check_graph(graph(), monkeypatch, iterations=3, skip=True)
