"""``pipe.stats()`` and ``pipe.trace()``: per-operator and per-stage accounting and the
bottleneck verdict, checked on a slow consumer and a slow loader."""

from __future__ import annotations

import json
import time

import numpy as np

from dlpipe import Pipeline, fn


def slow_source(delay):
    def source(info):
        time.sleep(delay)
        return np.zeros((2, 1), np.int32)

    return source


def make(delay, depth=2):
    pipe = Pipeline(batch_size=2, num_threads=2, prefetch_queue_depth=depth)
    with pipe:
        pipe.set_outputs(
            fn.cast(
                fn.external_source(slow_source(delay), batch_info=True, name="src"),
                dtype=np.float32,
            )
        )
    return pipe


def test_stats_count_operators_stages_and_batches():
    pipe = make(0.0)
    for _ in range(5):
        pipe.run()
    s = pipe.stats()
    assert s["batches"] == 5
    cast = [v for v in s["operators"].values() if v["schema"] == "cast"][0]
    assert cast["samples"] >= 10 and cast["device"] == "cpu"  # prefetched iterations count too
    assert s["stages"]["cpu"]["iterations"] >= 5
    assert pipe.stats(reset=True)["batches"] == 5 and pipe.stats()["batches"] == 0


def test_verdict_names_a_slow_consumer():
    pipe = make(0.0, depth=3)
    for _ in range(8):
        pipe.run()
        time.sleep(0.05)  # the "training step"
    s = pipe.stats()
    assert s["verdict"].startswith("the consumer is the bottleneck"), s
    assert s["consumer_work_ms_per_batch"] >= 40


def test_verdict_names_a_slow_loader():
    pipe = make(0.05)
    for _ in range(6):
        pipe.run()
    s = pipe.stats()
    assert s["verdict"].startswith("the loader is the bottleneck"), s
    assert s["consumer_wait_ms_per_batch"] >= 30


def test_trace_is_chrome_json(tmp_path):
    pipe = make(0.0)
    for _ in range(3):
        pipe.run()
    path = tmp_path / "trace.json"
    pipe.trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["name"] for e in events if e["ph"] == "X"}
    assert {"cpu stage", "consumer waits"} <= names
    assert any(e["ph"] == "M" and e["args"]["name"].startswith("dlpipe") for e in events)
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")


def test_add_op_records_as_add_ops():
    from dlpipe.profiler import Profiler

    a, b = Profiler(), Profiler()
    for name, dt, n in (("x", 0.5, 4), ("y", 0.25, 2), ("x", 0.125, 4)):
        a.add_op(name, dt, n, ("schema_" + name, "gpu"))
        b.add_ops({name: dt}, {name: n}, {name: ("schema_" + name, "gpu")})
    assert a.op_time == b.op_time and a.op_samples == b.op_samples and a.op_info == b.op_info


def test_add_op_calls_records_as_add_op_and_span():
    from dlpipe.profiler import Profiler

    calls = [("x", 1.0, 1.5, 4, ("sx", "gpu")), ("y", 2.0, 2.25, 2, ("sy", "gpu")),
             ("x", 3.0, 3.125, 4, ("sx", "gpu"))]  # fmt: skip
    a, b = Profiler(), Profiler()
    a.add_op_calls(calls, "gpu operator (host)")
    for name, start, end, n, info in calls:
        b.add_op(name, end - start, n, info)
        b.span(name, "gpu operator (host)", start, end)
    assert a.op_time == b.op_time and a.op_samples == b.op_samples and a.op_info == b.op_info
    assert list(a.events) == list(b.events)
