"""fn.python_function / fn.dl_tensor_python_function on the CPU: per sample and per batch, several
outputs, no outputs (preserved), layouts, serial calls in sample order whatever num_threads,
DALI's output checks, and use inside a pipeline with conditionals."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, PipelineError, fn, ops, pipeline_def

N = 5
XS = [np.arange(i + 1, dtype=np.float32) for i in range(N)]


def run(build, threads=2, batch_size=N):
    pipe = Pipeline(batch_size=batch_size, num_threads=threads, device_id=None, seed=1)
    with pipe:
        x = fn.external_source(source=lambda: XS, batch=True)
        outs = build(x)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    return pipe.run()


def test_per_sample_function():
    (out,) = run(lambda x: fn.python_function(x, function=lambda a: a * 2 + 1))
    for i in range(N):
        np.testing.assert_array_equal(out.at(i), XS[i] * 2 + 1)


def test_several_inputs_and_outputs_with_layouts():
    def f(a, b):
        return a + b, np.int32(len(a)) * np.ones((2, 2), np.int32)

    s, n = run(lambda x: fn.python_function(x, x, function=f, num_outputs=2, output_layouts=["W"]))
    assert s.layout() == "W" and n.layout() == ""
    for i in range(N):
        np.testing.assert_array_equal(s.at(i), XS[i] * 2)
        assert n.at(i).dtype == np.int32 and n.at(i).tolist() == [[i + 1] * 2] * 2


def test_batch_processing_lists_or_one_array():
    def as_list(batch):
        return [a[::-1] for a in batch]

    def as_array(batch):
        return np.stack([np.float32([a.sum(), len(a)]) for a in batch])

    rev, dense = run(
        lambda x: (
            fn.python_function(x, function=as_list, batch_processing=True),
            fn.python_function(x, function=as_array, batch_processing=True, output_layouts="C"),
        )
    )
    assert dense.layout() == "C"
    for i in range(N):
        np.testing.assert_array_equal(rev.at(i), XS[i][::-1])
        assert dense.at(i).tolist() == [XS[i].sum(), i + 1]


def test_calls_are_serial_and_in_sample_order_whatever_the_threads():
    for threads in (1, 2):
        seen = []

        def record(a, seen=seen):
            seen.append(len(a))
            return a

        run(lambda x, record=record: fn.python_function(x, function=record), threads=threads)
        assert seen and seen == [1, 2, 3, 4, 5] * (len(seen) // 5)  # (prefetched iterations)


def test_no_outputs_is_preserved_and_runs():
    calls = []
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: XS[:3], batch=True)
        assert fn.python_function(x, function=lambda a: calls.append(a.size), num_outputs=0) == ()
        pipe.set_outputs(x)
    pipe.run()
    assert calls and calls == [1, 2, 3] * (len(calls) // 3)


def test_no_inputs():
    (out,) = run(lambda x: fn.python_function(function=lambda: np.float32(7)))
    assert [float(out.at(i)) for i in range(N)] == [7.0] * N


def test_dl_tensor_python_function_batches_of_capsules():
    def f(batch):
        return [(np.from_dlpack(_Wrap(c)) * 3).__dlpack__() for c in batch]

    (out,) = run(lambda x: fn.dl_tensor_python_function(x, function=f))
    for i in range(N):
        np.testing.assert_array_equal(out.at(i), XS[i] * 3)


class _Wrap:
    def __init__(self, c):
        self.c = c

    def __dlpack__(self, **kw):
        return self.c

    def __dlpack_device__(self):
        return (1, 0)


def test_output_checks():
    with pytest.raises(
        PipelineError, match="multi-output Python function operator must be a tuple"
    ):
        run(lambda x: fn.python_function(x, function=lambda a: a, num_outputs=2))
    with pytest.raises(PipelineError, match="Unexpected number of outputs .* got 3, expected 2"):
        run(lambda x: fn.python_function(x, function=lambda a: (a, a, a), num_outputs=2))
    with pytest.raises(PipelineError, match="ZeroDivisionError"):
        run(lambda x: fn.python_function(x, function=lambda a: 1 / 0))
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe, pytest.raises(ArgumentError, match="function=3 must be callable"):
        fn.python_function(function=3)


def test_ops_spelling():
    (out,) = run(lambda x: ops.PythonFunction(function=lambda a: -a)(x))
    np.testing.assert_array_equal(out.at(2), -XS[2])


def _negate_in_python(a):
    if a.sum() > 3:  # a Python if on data: never rewritten by the conditionals
        return -a
    return a


def test_inside_a_pipeline_with_conditionals():
    preds = [np.array(i % 2 == 0) for i in range(N)]

    @pipeline_def(enable_conditionals=True, batch_size=N, num_threads=2, device_id=None)
    def graph():
        x = fn.external_source(source=lambda: XS, batch=True)
        p = fn.external_source(source=lambda: preds, batch=True)
        if p:
            y = fn.python_function(x, function=_negate_in_python)
        else:
            y = x * 10
        return y

    (out,) = graph().run()
    for i in range(N):
        want = _negate_in_python(XS[i]) if i % 2 == 0 else XS[i] * 10
        np.testing.assert_array_equal(out.at(i), want)
