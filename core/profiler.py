"""What the executor measures while it runs: per-operator time, per-stage time, how long the
consumer waited and how many batches were ready. ``pipe.stats()`` summarises it with a verdict
on where the bottleneck is; ``pipe.trace(path)`` writes a Chrome/Perfetto trace (open it at
https://ui.perfetto.dev or chrome://tracing).

Everything is host time taken with ``time.perf_counter``: a few hundred nanoseconds per
operator call. Operator time is summed over the worker threads, so with 8 threads a stage can
take 1 s of wall time and 8 s of operator time. The trace keeps the most recent events only
(``max_events``), so memory stays bounded on long runs.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque


class Profiler:
    def __init__(self, max_events: int = 200_000):
        self._lock = threading.Lock()
        self.t0 = time.perf_counter()
        self.events: deque = deque(maxlen=max_events)
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.op_time: dict[str, float] = defaultdict(float)
            self.op_samples: dict[str, int] = defaultdict(int)
            self.op_info: dict[str, tuple[str, str]] = {}
            self.stage_time: dict[str, float] = defaultdict(float)
            self.stage_iters: dict[str, int] = defaultdict(int)
            self.wait_time = 0.0
            self.wait_between = 0.0
            self.gets = 0
            self.ready_total = 0
            self.first_get: float | None = None
            self.last_get: float | None = None

    # --- recording (called by the executor) --------------------------------------------------
    def span(self, name: str, cat: str, start: float, end: float) -> None:
        self.events.append((name, cat, start, end, threading.get_ident()))

    def add_ops(self, times: dict, samples: dict, info: dict) -> None:
        with self._lock:
            for name, dt in times.items():
                self.op_time[name] += dt
                self.op_samples[name] += samples[name]
            self.op_info.update(info)

    def add_op(self, name: str, dt: float, samples: int, info: tuple[str, str]) -> None:
        """:meth:`add_ops` of one operator call, without its dictionaries (the GPU stage
        records one per operator and batch)."""
        with self._lock:
            self.op_time[name] += dt
            self.op_samples[name] += samples
            self.op_info[name] = info

    def add_op_calls(self, calls: list, cat: str) -> None:
        """:meth:`add_op` and :meth:`span` of several operator calls, ``(name, start, end,
        samples, info)`` each, under one lock (the GPU stage records its ~50 operators of an
        iteration at once, the CPU stage its batch-level ones)."""
        tid = threading.get_ident()
        with self._lock:
            op_time, op_samples, op_info = self.op_time, self.op_samples, self.op_info
            for name, start, end, samples, info in calls:
                op_time[name] += end - start
                op_samples[name] += samples
                op_info[name] = info
        self.events.extend([(name, cat, start, end, tid) for name, start, end, _, _ in calls])

    def add_stage(self, stage: str, start: float, end: float) -> None:
        with self._lock:
            self.stage_time[stage] += end - start
            self.stage_iters[stage] += 1
        self.span(f"{stage} stage", "stage", start, end)

    def add_get(self, start: float, end: float, ready: int) -> None:
        with self._lock:
            self.wait_time += end - start
            if self.gets:  # waits between the first and the last batch
                self.wait_between += end - start
            self.gets += 1
            self.ready_total += ready
            if self.first_get is None:
                self.first_get = end
            self.last_get = end
        self.span("consumer waits", "consumer", start, end)

    # --- reporting ---------------------------------------------------------------------------
    def stats(self) -> dict:
        with self._lock:
            ops = {
                name: {
                    "schema": self.op_info[name][0],
                    "device": self.op_info[name][1],
                    "total_s": round(t, 6),
                    "samples": self.op_samples[name],
                    "per_sample_us": round(1e6 * t / max(1, self.op_samples[name]), 2),
                }
                for name, t in sorted(self.op_time.items(), key=lambda kv: -kv[1])
            }
            stages = {
                s: {
                    "iterations": self.stage_iters[s],
                    "total_s": round(t, 6),
                    "per_iteration_ms": round(1e3 * t / max(1, self.stage_iters[s]), 3),
                }
                for s, t in self.stage_time.items()
            }
            gets = self.gets
            wait = self.wait_time
            wait_between = self.wait_between
            span = (self.last_get - self.first_get) if gets > 1 else 0.0
            ready = self.ready_total / gets if gets else 0.0
        per_batch_wait = wait / gets if gets else 0.0
        # Time between batches that the consumer spent on its own work (training step, ...).
        busy = max(0.0, span - wait_between) / max(1, gets - 1) if gets > 1 else 0.0
        return {
            "batches": gets,
            "operators": ops,
            "stages": stages,
            "consumer_wait_ms_per_batch": round(1e3 * per_batch_wait, 3),
            "consumer_work_ms_per_batch": round(1e3 * busy, 3),
            "mean_ready_batches": round(ready, 3),
            "verdict": _verdict(per_batch_wait, busy, ready, ops, gets),
        }

    def write_trace(self, path: str) -> None:
        names: dict[int, str] = {t.ident: t.name for t in threading.enumerate()}
        events = []
        for name, cat, start, end, tid in list(self.events):
            events.append(
                {
                    "name": name,
                    "cat": cat,
                    "ph": "X",
                    "pid": 1,
                    "tid": tid,
                    "ts": round(1e6 * (start - self.t0), 3),
                    "dur": round(1e6 * (end - start), 3),
                }
            )
        for tid in {e["tid"] for e in events}:
            events.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": 1,
                    "tid": tid,
                    "args": {"name": names.get(tid, f"thread {tid}")},
                }
            )
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def _verdict(wait: float, busy: float, ready: float, ops: dict, gets: int) -> str:
    if gets < 2:
        return "not enough batches taken yet to judge"
    slowest = next(iter(ops), None)
    share = wait / (wait + busy) if wait + busy > 0 else 0.0
    if share > 0.1:
        hint = f"; the slowest operator is {slowest!r}" if slowest else ""
        return (
            f"the loader is the bottleneck: the consumer waited {100 * share:.0f}% of its "
            f"time for batches{hint} (more num_threads or GPU operators would help)"
        )
    return (
        f"the consumer is the bottleneck: it waited only {100 * share:.0f}% of its time "
        f"and {ready:.1f} batches were ready on average; the loader has headroom"
    )
