"""The staged executor: CPU stage (per-sample work on a thread pool) -> mixed/GPU stage.

One iteration produces one batch:

1. *Parameters*: on the stage thread, in graph order, every operator draws its per-sample
   parameters (reader positions, random numbers). Sequential, so the batches do not depend on
   the thread count.
2. *CPU stage*: the CPU operators run per sample; ``num_threads`` workers pull sample indices
   from a shared counter, each running the whole chain of per-sample operators for its sample.
   A batch-level operator splits the chain into segments. A segment of light operators only
   (readers feeding a GPU decoder, random numbers) runs on the stage thread itself.
3. *Mixed and GPU stages* (when the graph has mixed/GPU operators): the GPU decoders of up to
   ``lanes`` iterations run at once on a small pool of lane threads, then a GPU-stage thread
   runs the GPU operators batch-wise, in order, on the pipeline's CUDA stream
   (``executor_gpu.py``). With lanes, the CPU stage runs ``lookahead`` iterations further
   ahead, and a feeder thread hands its workspaces to the lanes as they have room.

With ``exec_async`` the stages run on their own threads and up to ``prefetch_queue_depth``
iterations are in flight; ``schedule()`` hands out tickets the way DALI's ``schedule_run``
does (the first call queues the whole depth). Any exception in a worker or stage is re-raised
in the caller of ``get()``, naming the operator, the sample and its file.
"""

from __future__ import annotations

import atexit
import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import numpy as np

from ._conditionals import Held, Scattered, Selections, compact
from ._ipc.process import HelperStartError
from ._sample_processes import Pending, RemoteRun, SampleProcesses, phases
from ._skiplog import SkipLog
from .errors import DecodeError, DlpipeError, PipelineError, SampleSkipped
from .graph import Batch, DataNode, Operator, OpNode, Repeated, Rows
from .operators._copy import PinnedBlocks, PinnedSamples
from .profiler import Profiler
from .tensors import TensorListCPU


@dataclass
class Workspace:
    """The data of one iteration, keyed by DataNode."""

    iteration: int
    batch_size: int
    values: dict[DataNode, list] = field(default_factory=dict)
    source_info: list[str] = field(default_factory=list)
    params: dict[OpNode, list | None] = field(default_factory=dict)
    gpu: Any = None  # per-iteration GPU state (events, buffers), owned by the GPU stage
    state: list | None = None  # operator states after this iteration (checkpointing)
    dense: dict[DataNode, _DenseBatch] = field(default_factory=dict)
    skipped: list[dict] = field(default_factory=list)  # reported when the batch is handed out
    # conditionals: each scope's samples, for the batch-level operators (emptied when skipped
    # samples are replaced: new value lists)
    selections: Selections = field(default_factory=Selections)


_ARRAYS = (np.ndarray, Rows)  # what a batch-level operator gives as one array


class _BatchLevelSpec:
    """What ``Executor._run_batch_level`` reads of a node on every call, worked out once
    (the graph does not change once built): ~65-100 calls a batch in the automatic
    augmentations, where each attribute and set lookup counts."""

    __slots__ = ("inputs", "args", "outputs", "array_only", "same", "name", "info")

    def __init__(self, node: OpNode, array_only: frozenset[int], same: set[int]):
        self.inputs = tuple(node.inputs)
        self.args = tuple(node.arg_nodes.items())
        self.outputs = tuple(node.outputs)
        self.array_only = tuple(id(dn) in array_only for dn in node.outputs)
        self.same = id(node) in same
        self.name = node.name
        self.info = (node.op.schema, "cpu")


class _DenseBatch:
    """The batch buffer of one CPU output: samples are copied in as they finish (see
    ``Executor._to_dense``); ``ragged`` once a sample's shape or dtype differs."""

    def __init__(self, first: np.ndarray, n: int):
        self.array = np.empty((n, *first.shape), first.dtype)
        self.written = bytearray(n)
        self.ragged = False

    @classmethod
    def of(cls, batch: np.ndarray) -> _DenseBatch:
        """A buffer already filled: a batch-level operator's output array."""
        slot = cls.__new__(cls)
        slot.array = batch
        slot.written = bytearray(b"\x01" * len(batch))
        slot.ragged = False
        return slot


@dataclass
class _Submitted:
    """An iteration whose CPU stage stopped after sending part ``phase`` of segment
    ``segment`` to the sample processes (``pending``); the stage's back goes on from there."""

    ws: Workspace
    segment: int
    phase: int
    pending: Pending


class _EndOfData:
    """Marks the iteration at which a source raised StopIteration (end of the epoch)."""


_END = _EndOfData()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _sample_error(exc: BaseException, node: OpNode, i: int, ws: Workspace) -> BaseException:
    where = (
        f"operator {node.op.schema!r} (name {node.name!r}), sample {i} of iteration {ws.iteration}"
    )
    if ws.source_info and ws.source_info[i]:
        where += f", file {ws.source_info[i]!r}"
    if isinstance(exc, DlpipeError):
        try:
            new = type(exc)(f"{exc} [in {where}]")
            new.__cause__ = exc.__cause__
            return new
        except Exception:  # pragma: no cover - a subclass with another signature
            pass
    err = PipelineError(f"{type(exc).__name__}: {exc} [in {where}]")
    err.__cause__ = exc
    return err


class AllSkipped(DecodeError):
    """Every sample of an iteration was skipped (``on_error="skip"``): the executor drops the
    iteration and hands out the next one in its place (``Executor.get``). ``records`` are
    its skipped samples, for ``pipe.skipped()``."""

    def __init__(self, message: str, records: list[dict]):
        super().__init__(message)
        self.records = records


class _Dropped:
    """An iteration dropped because every sample of it was skipped, on its way through the
    stage queues to ``get()`` (which schedules one more iteration in its place)."""

    def __init__(self, exc: AllSkipped):
        self.exc = exc


# Iterations in a row whose every sample was skipped before get() gives up, when the readers
# do not say how many batches an epoch has (external sources); see Executor._refill_limit.
MAX_DROPPED = 100


def replace_skipped(ws: Workspace, skipped: dict[int, tuple[OpNode, str]]) -> None:
    """Fill each skipped sample with the nearest good sample of the batch (every output, CPU
    or GPU, so data and labels stay paired) and record what was skipped.

    Raises:
        AllSkipped: no sample of the batch is good; the executor then drops the iteration and
            takes the next one of the stream in its place (``Executor.get``).
    """
    good = [i for i in range(ws.batch_size) if i not in skipped]
    for i, (node, message) in sorted(skipped.items()):
        ws.skipped.append(
            {
                "iteration": ws.iteration,
                "sample": i,
                "file": ws.source_info[i],
                "operator": node.name,
                "error": message,
            }
        )
    if not good:
        files = [r["file"] for r in ws.skipped if r["iteration"] == ws.iteration]
        raise AllSkipped(
            f"every sample of iteration {ws.iteration} was skipped (on_error='skip'): "
            f"{files}; last error: {ws.skipped[-1]['error']}",
            ws.skipped,
        )
    ws.selections.clear()
    source = list(range(ws.batch_size))
    for i in skipped:
        source[i] = min(good, key=lambda g: (abs(g - i), g))
    for dn, values in ws.values.items():
        if isinstance(values, list):
            ws.values[dn] = [values[j] for j in source]
        else:  # a GPU batch (tensors_gpu.SampleList): views of the replacements
            ws.values[dn] = values.take(source)
    for slot in ws.dense.values():  # cpu_output copies the replacement in
        for i in skipped:
            slot.written[i] = 0
    ws.source_info = [ws.source_info[j] for j in source]


def row_views(batch: np.ndarray) -> list:
    """The rows of a batch array as views, ``batch[i, ...]`` each (0-d arrays for a 1-D batch,
    not numpy scalars), made in C: ``np.nditer`` gives a 1-D batch's 0-d views 5-10x faster
    than indexing it per row (a batch-level operator's 128 scalars: ~30 us a batch)."""
    if batch.ndim != 1 or batch.dtype.hasobject:
        return list(batch) if batch.ndim > 1 else [batch[i, ...] for i in range(len(batch))]
    write = "readwrite" if batch.flags.writeable else "readonly"
    return list(np.nditer(batch, flags=["zerosize_ok"], op_flags=[write], order="C"))


def cpu_output(ws: Workspace, dn: DataNode, layouts: dict[DataNode, str]) -> TensorListCPU:
    """A CPU output of the iteration: one batch array when every sample fitted the buffer the
    workers filled (``Executor._to_dense``), else the sample list."""
    slot = ws.dense.get(dn)
    values = ws.values[dn]
    batch = values
    if slot is not None and not slot.ragged:
        batch = slot.array
        for i, done in enumerate(slot.written):
            if not done:  # a replaced (skipped) sample, or one made outside the pool
                v = values[i]
                if v.shape != slot.array.shape[1:] or v.dtype != slot.array.dtype:
                    batch = values
                    break
                slot.array[i] = v
    return TensorListCPU(batch, layouts.get(dn, ""), ws.source_info)


def _call_source(node: OpNode, n: int, iteration: int) -> list:
    """A source's batch; a user callback's exception keeps its type, with a note saying where."""
    try:
        return node.op.batch_params(n)
    except StopIteration:
        raise
    except Exception as e:
        if hasattr(e, "add_note") and not isinstance(e, DlpipeError):
            e.add_note(
                f"raised by the source of {node.op.schema!r} (name {node.name!r}) "
                f"in iteration {iteration}"
            )
        raise


# Iterations a lane may decode ahead of the GPU stage beyond one per lane: the GPU stage takes
# them in order, and lanes finish out of order; with none spare, a lane that finished waits for
# the slowest. Two spare made 5-12% more img/s on an H200, for two decoded batches of GPU
# memory (BENCHMARKS.md, fifth session).
DECODED_SPARE = 2
_LIVE: weakref.WeakSet = weakref.WeakSet()  # executors with stage threads, for _close_all


@atexit.register
def _close_all() -> None:
    """At interpreter exit, stop the stage threads of pipelines nobody closed: a daemon thread
    killed inside a C++ decoder call can abort the process ("terminate called without an
    active exception")."""
    for ex in list(_LIVE):
        ex.close()


def _draws_params(op: Operator) -> bool:
    """Whether ``op`` has a ``batch_params`` of its own (the base one gives None)."""
    return type(op).batch_params is not Operator.batch_params or "batch_params" in vars(op)


def _takes_from(node: OpNode, producers: list[OpNode]) -> bool:
    """Whether an input or argument input of ``node`` is an output of one of ``producers``."""
    made = set(producers)
    return any(x.source in made for x in (*node.inputs, *node.arg_nodes.values()))


class Executor:
    """Runs the operators of a built graph; see the module docstring.

    Args:
        cpu_ops: CPU operator nodes in topological order.
        outputs: the pipeline's output nodes.
        layouts: layout per DataNode.
        batch_size: samples per iteration.
        num_threads: CPU worker threads.
        depth: iterations queued by the first ``schedule()``.
        run_async: run stages on background threads.
        gpu_stage: optional callable finishing a workspace on the GPU and returning outputs.
        gpu_ops: mixed/GPU operator nodes; their ``batch_params`` are drawn on the CPU stage.
        snapshot: optional callable returning the operators' states; called after each
            iteration's parameters are drawn, so ``last_state`` is the state right after the
            batch the consumer took last (checkpoints stay exact despite prefetching).
        lookahead: iterations the CPU stage runs ahead of the prefetch depth when the GPU
            stage has lanes, so that a lane never waits for the CPU stage. They wait as the
            CPU stage's output (encoded bytes, on the host): at most ``lanes`` +
            ``decoded_spare`` iterations are decoded ahead of the GPU stage, and at most
            ``depth`` finished batches wait for the consumer (``_to_lane``, ``_gpu_finish``).
        skipped_history: records of skipped samples kept (``SkipLog``); counts cover all.
        sample_processes: how many helper processes run the process-safe part of a run of
            per-sample operators (``_sample_processes.py``); 0: threads only.
        upload_area_bytes: their upload area's size (``_upload_area.py``); 0: none.

    Skipping: an operator with ``on_error="skip"`` drops samples, which ``replace_skipped``
    fills from the good samples of the same batch. An iteration with no good sample left
    is dropped whole, and ``get()`` hands out the next iteration of the stream in its place
    (scheduling one more). Invariant: the batches handed out are the iterations in the
    order their parameters were drawn (a deterministic sequence, whatever the threads or
    lanes), less those whose every sample was skipped; each batch's ``last_state`` is the
    state after its own draw, so a checkpoint resumes right after it. Readers stream on, so
    an epoch keeps its number of batches; its last ones then take the samples that follow
    (the next epoch's first) in place of the dropped batch.
    """

    def __init__(
        self,
        cpu_ops: Sequence[OpNode],
        outputs: Sequence[DataNode],
        layouts: dict[DataNode, str],
        batch_size: int,
        num_threads: int,
        depth: int,
        run_async: bool,
        gpu_stage: Callable[[Workspace], tuple] | None = None,
        snapshot: Callable[[], list] | None = None,
        gpu_ops: Sequence[OpNode] = (),
        lookahead: int = 0,
        decoded_spare: int = DECODED_SPARE,
        skipped_history: int = 1000,
        sample_processes: int = 0,
        upload_area_bytes: int = 0,
    ):
        self.cpu_ops = list(cpu_ops)
        self.outputs = list(outputs)
        self.layouts = layouts
        self.batch_size = batch_size
        self.num_threads = num_threads
        self.depth = max(1, depth)
        self.run_async = run_async
        self.gpu_stage = gpu_stage
        self.gpu_ops = list(gpu_ops)
        self.snapshot = snapshot
        self.skipped = SkipLog(skipped_history)  # samples dropped by on_error="skip" operators
        self._dropped_in_a_row = 0  # iterations whose every sample was skipped (get)
        self.profiler = Profiler()
        if gpu_stage is not None:
            gpu_stage.profiler = self.profiler
        self.last_state: list | None = None
        self._segments = self._split_segments()
        self._array_only = self._arrays_only()
        batch_level = {id(nodes[0]) for is_batch, nodes in self._segments if is_batch}
        # batch-level constants whose outputs are array-only: (id, batch size) -> outputs
        self._same: set[int] = {
            id(node)
            for node in self.cpu_ops
            if id(node) in batch_level
            and node.op.same_each_batch
            and not node.inputs
            and not node.arg_nodes
            and node.scope is None
            and all(id(dn) in self._array_only for dn in node.outputs)
        }
        self._kept: dict[tuple[int, int], list] = {}
        self._specs: dict[OpNode, _BatchLevelSpec] = {}
        self._per_sample_outputs = [
            dn for node in self.cpu_ops if id(node) not in batch_level for dn in node.outputs
        ]
        # Runs with process-safe parts, by the run's id: their phases (_sample_processes.phases)
        self._remote: dict[int, list[list[OpNode] | RemoteRun]] = {}
        self._sample_processes = None
        if sample_processes > 0:
            used = self._used_outside()
            for batch_level, nodes in self._segments:
                if not batch_level:
                    parts = phases(nodes, used)
                    if parts is not None:
                        self._remote[id(nodes)] = parts
            if self._remote:
                self._sample_processes = SampleProcesses(sample_processes, upload_area_bytes)
        # The CPU stage in two threads: the front sends an iteration's samples to the sample
        # processes and goes on to the next; the back collects them (_run_cpu, _run_back)
        self._back = run_async and self._sample_processes is not None
        # Readers that read ahead (``Operator.prefetch``): the stage draws each iteration's
        # parameters one iteration early and starts those reads then, so they run while it
        # finishes the iteration before. Not with sources (feed_input, callbacks): DALI calls
        # those once per iteration scheduled, not earlier.
        self._prefetchers = (
            [
                n
                for n in self.cpu_ops
                if type(n.op).prefetch is not Operator.prefetch and n.scope is None
            ]
            if run_async and not any(n.op.provides_batch for n in self.cpu_ops)
            else []
        )
        self._ahead: Workspace | None = None  # the next iteration, drawn
        self._source_info_ops = [n for n in self.cpu_ops if getattr(n.op, "needs_source_info", 0)]
        # the operators that draw parameters (batch_params of their own), in graph order; the
        # others' are None (~80 calls a batch fewer in the automatic augmentations)
        self._drawing_cpu = [n for n in self.cpu_ops if _draws_params(n.op)]
        self._drawing_gpu = [n for n in self.gpu_ops if _draws_params(n.op)]
        self._paramless = tuple(
            n for n in (*self.cpu_ops, *self.gpu_ops) if not _draws_params(n.op)
        )
        # CPU batches the workers pack into one array as samples finish: the pipeline's CPU
        # outputs, and the inputs of GPU-stage operators that take a whole batch (.gpu())
        self._cpu_outputs = {x for x in self.outputs if x.device == "cpu"}
        self._cpu_outputs |= {
            x for node in self.gpu_ops if node.op.dense_inputs for x in node.inputs
        }
        self._dense_lock = threading.Lock()
        self._pool = (
            ThreadPoolExecutor(num_threads, thread_name_prefix="dlpipe-worker")
            if num_threads > 1
            else None
        )
        lanes = getattr(gpu_stage, "lanes", 0) if run_async else 0
        self._mixed_pool = (
            ThreadPoolExecutor(lanes, thread_name_prefix="dlpipe-mixed") if lanes else None
        )
        self._lookahead = max(0, lookahead) if lanes else 0
        self._decode_ahead = lanes + decoded_spare
        # The lane feeder and the GPU stage wait here for room (_to_lane, _gpu_finish)
        self._room = threading.Condition()
        self._submitted = 0  # iterations handed to the lane feeder
        self._through_gpu = 0  # of those, how many the GPU stage has finished
        self._iteration = 0
        self._scheduled = 0
        self._first = True
        self._at_end = False
        self._closed = False
        self._failed: BaseException | None = None
        self._tickets: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._resume = threading.Event()
        if run_async:
            self._start_threads()
            _LIVE.add(self)

    # --- scheduling -------------------------------------------------------------------------
    def to_schedule(self) -> int:
        """How many iterations the next ``schedule()`` queues."""
        return self.depth if self._first else 1

    def rearm(self) -> None:
        """Make the next ``schedule()`` queue the whole depth again (a new epoch)."""
        self._first = True

    def schedule(self, count: int | None = None) -> None:
        """Queue one iteration (the whole prefetch depth on the first call), or ``count``."""
        self._check_open()
        if self._at_end:  # DALI: nothing is scheduled past the end of the data until reset
            return
        n = self.to_schedule() if count is None else count
        self._first = False
        self._scheduled += n
        if self.run_async:
            # The lookahead's tickets are queued once, with the first; from then on each
            # iteration handed out is replaced by one, so they stay ahead.
            extra, self._lookahead = self._lookahead, 0
            for _ in range(n + extra):
                self._tickets.put(True)

    def pending(self) -> int:
        """Iterations scheduled but not yet taken by ``get()``."""
        return self._scheduled

    def capacity(self) -> int:
        """Iterations this executor works on at once before a stage waits for room: ``depth``
        finished batches for the consumer, and with lanes ``lanes + decoded_spare`` more
        decoded or being decoded (``_to_lane``). A caller that feeds its external sources one
        iteration at a time (the PyTorch proxy) keeps this many scheduled to keep every
        lane busy: a lane decodes a whole batch, so two iterations in flight leave the
        third lane idle and each batch waits for one lane's decoding."""
        return self.depth + (self._decode_ahead if self._mixed_pool is not None else 0)

    def get(self) -> tuple:
        """The outputs of the oldest scheduled iteration (blocks until ready)."""
        self._check_open()
        if self._failed is not None:
            raise PipelineError(
                f"the pipeline is no longer valid after an earlier error: {self._failed}"
            ) from self._failed
        if self._scheduled == 0 or self._at_end:
            raise StopIteration
        self._scheduled -= 1
        if not self.run_async:
            while True:
                try:
                    outputs, self.last_state, skipped = self._finish(self._run_cpu())
                except AllSkipped as e:  # the next iteration in its place
                    self._drop(e)
                    continue
                except StopIteration:
                    self._end_of_data()
                    raise
                except BaseException as e:
                    self._failed = e
                    raise
                self._dropped_in_a_row = 0
                self.skipped += skipped
                return outputs
        while True:
            ready = self._done.qsize()
            start = perf_counter()
            item = self._done.get()
            if self._mixed_pool is not None:  # room for the GPU stage's next batch
                with self._room:
                    self._room.notify_all()
            self.profiler.add_get(start, perf_counter(), ready)
            if not isinstance(item, _Dropped):
                break
            self._drop(item.exc)
            self._tickets.put(True)  # one more iteration, in the dropped one's place
        if item is _END:
            self._end_of_data()
            raise StopIteration
        if isinstance(item, _Failure):
            self._failed = item.exc
            raise item.exc
        outputs, self.last_state, skipped = item
        self._dropped_in_a_row = 0
        self.skipped += skipped
        return outputs

    def _drop(self, exc: AllSkipped) -> None:
        """Record an iteration whose every sample was skipped; give up (an error naming the
        files) once more iterations in a row than an epoch has were dropped."""
        self.skipped += exc.records
        self._dropped_in_a_row += 1
        if self._dropped_in_a_row > self._refill_limit():
            self._failed = DecodeError(
                f"{self._dropped_in_a_row} iterations in a row had every sample skipped "
                f"(on_error='skip'), more than one epoch: is any of the data readable? "
                f"The last: {exc}"
            )
            raise self._failed

    def _refill_limit(self) -> int:
        """Dropped iterations in a row allowed: one epoch of the largest reader, in batches
        (a whole epoch bad is not going to get better), else ``MAX_DROPPED``."""
        sizes = [
            n.op.reader_meta().get("epoch_size", 0)
            for n in self.cpu_ops
            if n.op.is_reader and hasattr(n.op, "reader_meta")
        ]
        if not sizes or max(sizes) <= 0:
            return MAX_DROPPED
        return -(-max(sizes) // self.batch_size)

    def _check_open(self) -> None:
        if self._closed:
            raise PipelineError("the pipeline is closed: it cannot run any more")

    def _end_of_data(self) -> None:
        # DALI: nothing stays scheduled past the end of the data. Tickets already queued run
        # the next epoch's first iterations after resume(), ahead of what is scheduled then.
        self._scheduled = 0
        self._at_end = True

    def resume(self) -> None:
        """After the end of the data: let the stage threads run the next epoch."""
        self._at_end = False
        self._resume.set()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._resume.set()
        with self._room:  # wake the lane feeder and the GPU stage waiting for room
            self._room.notify_all()
        for _ in self._threads:
            self._tickets.put(None)
        for t in self._threads:
            t.join(timeout=10)
        if self._mixed_pool is not None:
            self._mixed_pool.shutdown(wait=True, cancel_futures=True)
        while True:  # batches nobody will take: their GPU memory (decode slots) goes now
            try:
                self._done.get_nowait()
            except queue.Empty:
                break
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        if self._sample_processes is not None:
            self._sample_processes.stop()

    # --- threads ----------------------------------------------------------------------------
    def _start_threads(self) -> None:
        def thread(inbox: queue.Queue, outbox: queue.Queue, fn: Callable, name: str):
            return threading.Thread(
                target=self._stage_loop, args=(inbox, outbox, fn), name=name, daemon=True
            )

        if self.gpu_stage is None and not self._back:
            self._threads = [
                thread(self._tickets, self._done, self._cpu_then_finish, "dlpipe-cpu-stage")
            ]
        elif self.gpu_stage is None:
            mid: queue.Queue = queue.Queue()
            self._threads = [
                thread(self._tickets, mid, self._run_cpu, "dlpipe-cpu-stage"),
                thread(mid, self._done, self._back_then_finish, "dlpipe-cpu-back"),
            ]
        else:
            mid = queue.Queue()
            self._threads = [thread(self._tickets, mid, self._run_cpu, "dlpipe-cpu-stage")]
            if self._back:
                cpu_front, mid = mid, queue.Queue()
                self._threads.append(thread(cpu_front, mid, self._run_back, "dlpipe-cpu-back"))
            if self._mixed_pool is not None:  # CPU stage -> feeder -> lanes, in order
                cpu_out, mid = mid, queue.Queue()
                self._threads.append(thread(cpu_out, mid, self._to_lane, "dlpipe-lane-feeder"))
            finish = self._finish if self._mixed_pool is None else self._gpu_finish
            self._threads.append(thread(mid, self._done, finish, "dlpipe-gpu-stage"))
        for t in self._threads:
            t.start()

    def _cpu_then_finish(self, _ticket) -> tuple[tuple, list | None, list[dict]]:
        return self._finish(self._run_cpu())

    def _back_then_finish(self, item) -> tuple[tuple, list | None, list[dict]]:
        return self._finish(self._run_back(item))

    def _to_lane(self, ws: Workspace) -> Future:
        """The lane feeder: hand an iteration's mixed operators to a lane once fewer than
        ``lanes + DECODED_SPARE`` earlier iterations are decoded, or being decoded, and not yet
        through the GPU stage (each holds its decoded images on the GPU). The futures go to the
        GPU stage in order. The wait depends only on earlier iterations, so it cannot deadlock;
        and it is on a daemon thread, not a lane, so an abandoned pipeline does not hold up the
        interpreter's exit (Python joins lane threads at exit)."""
        seq = self._submitted  # only this thread counts
        self._submitted += 1
        with self._room:
            while seq >= self._through_gpu + self._decode_ahead and not self._closed:
                self._room.wait()
        if self._closed:
            raise PipelineError("the pipeline was closed")
        return self._mixed_pool.submit(self._run_mixed, ws)

    def _run_mixed(self, ws: Workspace) -> Workspace:
        start = perf_counter()
        ws = self.gpu_stage.run_mixed(ws)
        self.profiler.add_stage("mixed", start, perf_counter())
        return ws

    def _gpu_finish(self, item: Future) -> tuple[tuple, list | None, list[dict]]:
        """The GPU stage with lanes: ``_finish``, once fewer than ``depth`` finished batches
        wait for the consumer (the CPU stage may run further ahead: see ``lookahead``)."""
        with self._room:
            while self._done.qsize() >= self.depth and not self._closed:
                self._room.wait()
        try:
            return self._finish(item)
        finally:
            with self._room:  # a lane may start the next iteration
                self._through_gpu += 1
                self._room.notify_all()

    def _stage_loop(self, inbox: queue.Queue, outbox: queue.Queue, fn: Callable) -> None:
        failed = False
        while True:
            item = inbox.get()
            if item is None or self._closed:
                outbox.put(None)
                return
            if item is _END or isinstance(item, _Dropped):
                outbox.put(item)
                continue
            if failed or isinstance(item, _Failure):
                outbox.put(
                    item
                    if isinstance(item, _Failure)
                    else _Failure(PipelineError("skipped after an earlier error"))
                )
                failed = True
                continue
            try:
                outbox.put(fn(item))
            except AllSkipped as e:  # not a failure: get() takes the next iteration instead
                outbox.put(_Dropped(e))
            except StopIteration:
                # End of the data: the consumer sees StopIteration after the batches before
                # it; the next epoch's iterations wait for reset().
                outbox.put(_END)
                self._resume.wait()
                self._resume.clear()
            except BaseException as e:  # re-raised in the consumer
                failed = True
                outbox.put(_Failure(e))

    # --- the CPU stage ------------------------------------------------------------------------
    def _split_segments(self) -> list[tuple[bool, list[OpNode]]]:
        """Runs of per-sample operators, split at batch-level operators. A batch-level operator
        (outside conditionals) that takes nothing from the per-sample run before it runs ahead
        of that run instead of cutting it in two: each cut waits for the run's last sample,
        with the workers idle while the batch-level operator runs (DALI's SSD example creates
        the image decoder before ``random_bbox_crop``, which reads the reader's boxes)."""
        segments: list[tuple[bool, list[OpNode]]] = []
        for node in self.cpu_ops:
            if node.op.batch_level_in(node):
                run = segments[-1][1] if segments and not segments[-1][0] else None
                if run is not None and node.scope is None and not _takes_from(node, run):
                    segments.insert(len(segments) - 1, (True, [node]))
                else:
                    segments.append((True, [node]))
            elif segments and not segments[-1][0]:
                segments[-1][1].append(node)
            else:
                segments.append((False, [node]))
        return segments

    def _arrays_only(self) -> frozenset[int]:
        """The ids of the outputs of batch-level CPU operators that only batch-level operators
        reading whole arrays take (``Operator.reads_batch_arrays``), or merges as their
        predicate (read by ``_conditionals.predicate_mask``, on the GPU stage too): not a
        pipeline output, nor a predicate of a scope with a per-sample CPU operator (read per
        sample: ``Scope.selects``), nor anything else a GPU or per-sample operator takes.
        :meth:`_run_batch_level` keeps such an output as one array (``graph.Batch``,
        ``_conditionals.Held``), with no per-sample list."""
        batch_level = {id(nodes[0]) for is_batch, nodes in self._segments if is_batch}
        takers: dict[int, list[tuple[OpNode, str | None]]] = {}
        kept = {id(dn) for dn in self.outputs}
        for node in (*self.cpu_ops, *self.gpu_ops):
            for x in node.inputs:
                takers.setdefault(id(x), []).append((node, None))
            for k, x in node.arg_nodes.items():
                takers.setdefault(id(x), []).append((node, k))
            scope = node.scope
            while scope is not None:  # read per sample by a per-sample operator of the scope
                if node.device == "cpu" and id(node) not in batch_level:
                    kept.add(id(scope.predicate))
                scope = scope.parent

        def reads_arrays(node: OpNode, arg: str | None) -> bool:
            if arg == "predicate" and getattr(node.op, "reads_child_scopes", False):
                return True  # a merge's predicate: read by predicate_mask (GPU: BranchPlan)
            return id(node) in batch_level and node.op.reads_batch_arrays

        return frozenset(
            id(dn)
            for node in self.cpu_ops
            if id(node) in batch_level
            for dn in node.outputs
            if id(dn) not in kept
            and takers.get(id(dn))
            and all(reads_arrays(t, arg) for t, arg in takers[id(dn)])
        )

    def _run_cpu(self, _ticket=None) -> Workspace | _Submitted:
        """The CPU stage of one iteration (a stage thread passes the ticket it took). With a
        back (``_back``), it stops once the first part for the sample processes is sent and
        the back thread goes on from there (``_run_back``)."""
        start = perf_counter()
        out = self._run_segments(self._draw_next(), hand_off=self._back)
        self.profiler.add_stage("cpu", start, perf_counter())
        return out

    def _run_back(self, item: Workspace | _Submitted) -> Workspace:
        """The rest of the CPU stage of an iteration whose front (``_run_cpu``) stopped at a
        part for the sample processes: its replies, and what follows them. The front runs
        the next iteration meanwhile, so the processes have its samples as soon as they are
        done with these (BENCHMARKS.md, "The CPU stage in two threads")."""
        if isinstance(item, Workspace):
            return item
        start = perf_counter()
        ws = self._run_segments(item.ws, at=item)
        self.profiler.add_stage("cpu back", start, perf_counter())
        return ws

    def _draw_next(self) -> Workspace:
        if self._ahead is not None:  # drawn (and its reads started) last iteration
            ws, self._ahead = self._ahead, None
        else:
            ws = self._draw()
        if self._prefetchers:
            self._ahead = self._draw()
        for out in self._per_sample_outputs:  # (batch-level operators set theirs whole)
            ws.values[out] = [None] * ws.batch_size
        return ws

    def _run_cpu_stage(self) -> Workspace:
        """The whole CPU stage of one iteration, on the calling thread."""
        return self._run_segments(self._draw_next())

    def _run_segments(
        self, ws: Workspace, at: _Submitted | None = None, hand_off: bool = False
    ) -> Workspace | _Submitted:
        """Run the segments of ``ws`` from the start, or from where ``at`` was sent (its
        replies first). ``hand_off``: return at the first part sent to the sample processes
        (a :class:`_Submitted`) instead of waiting for it."""
        first, first_phase = (at.segment, at.phase) if at is not None else (0, 0)
        timed: list = []  # the batch-level operators' calls, for the profiler
        try:
            return self._run_segments_from(ws, at, hand_off, first, first_phase, timed)
        finally:
            if timed:
                self.profiler.add_op_calls(timed, "operator")

    def _run_segments_from(
        self,
        ws: Workspace,
        at: _Submitted | None,
        hand_off: bool,
        first: int,
        first_phase: int,
        timed: list,
    ) -> Workspace | _Submitted:
        """:meth:`_run_segments` from segment ``first`` (part ``first_phase``), the
        batch-level operators' calls recorded in ``timed``."""
        for s in range(first, len(self._segments)):
            batch_level, nodes = self._segments[s]
            if batch_level:
                self._run_batch_level(nodes[0], ws, timed)
            elif id(nodes) in self._remote:
                parts = self._remote[id(nodes)]
                for p in range(first_phase if s == first else 0, len(parts)):
                    part = parts[p]
                    if at is not None:  # the part the front sent: its replies
                        self._collect_remote(part, ws, at.pending)
                        at = None
                    elif isinstance(part, RemoteRun):
                        pending = self._submit_remote(part, ws)
                        if pending is None:  # no process could start: threads did it
                            continue
                        if hand_off:
                            return _Submitted(ws, s, p, pending)
                        self._collect_remote(part, ws, pending)
                    else:
                        self._run_samples(part, ws)
            else:
                self._run_samples(nodes, ws)
        return ws

    def _run_batch_level(self, node: OpNode, ws: Workspace, timed: list | None = None) -> None:
        """Run a batch-level operator on its samples (its scope's, with conditionals). Its call
        is recorded in ``timed`` (``Profiler.add_op_calls``, once per iteration) when given.

        An output of an operator in a scope is held whole (None outside the scope), as a
        ``Scattered`` list that also keeps the operator's own output for its samples: the
        scope's next operators take that as it is (``_conditionals.compact``); an array-only
        output (:meth:`_arrays_only`) as one array, ``graph.Batch`` / ``_conditionals.Held``."""
        spec = self._specs.get(node)
        if spec is None:
            spec = self._specs[node] = _BatchLevelSpec(node, self._array_only, self._same)
        n = ws.batch_size
        values = ws.values
        if spec.same:  # (a constant: made once per batch size)
            kept = self._kept.get((id(node), n))
            if kept is not None:
                for out, value in zip(node.outputs, kept, strict=True):
                    values[out] = value
                return
        inputs = [values[x] for x in spec.inputs]
        args = {k: values[x] for k, x in spec.args} if spec.args else {}
        params = ws.params[node]
        idx = None  # conditionals: the operator sees only its branch's samples
        scope = node.scope
        if scope is not None:
            selections = ws.selections
            idx, rows = selections.of(scope, values, n)
            if len(idx) < n:
                inputs = [selections.compact(v, scope) for v in inputs]
                if args:
                    args = {k: selections.compact(v, scope) for k, v in args.items()}
                if params is not None:
                    params = compact(params, idx)
            else:
                idx = None
        op = node.op
        start = perf_counter()
        try:
            outs = op.run_batch_cpu(inputs, args, params)
        except BaseException as e:  # the sample named by the operator, else the first
            i = int(getattr(e, "sample_index", 0))
            i = idx[i] if idx is not None and i < len(idx) else i
            raise _sample_error(e, node, i, ws) from None
        call = (spec.name, start, perf_counter(), n, spec.info)
        if timed is not None:
            timed.append(call)
        else:
            self.profiler.add_op_calls([call], "operator")
        for out, array_only, vals in zip(spec.outputs, spec.array_only, outs, strict=True):
            if array_only and isinstance(vals, _ARRAYS):
                rep = isinstance(vals, Repeated)
                arr = vals.array if isinstance(vals, Rows) else vals
                values[out] = Batch(arr, rep) if idx is None else Held(arr, idx, rows, n)
                continue
            if idx is not None:  # back to the batch's positions
                part = vals if isinstance(vals, Rows) else None
                if isinstance(vals, np.ndarray):  # (its rows as iterating it gives them)
                    part = Batch(vals)
                full = [None] * n
                for j, v in zip(idx, vals, strict=True):
                    full[j] = v
                values[out] = full if part is None else Scattered(full, idx, rows, part)
                continue
            if isinstance(vals, np.ndarray):  # a dense batch: its rows are the samples
                ws.dense[out] = _DenseBatch.of(vals)
                vals = Rows(row_views(vals), vals)
            values[out] = vals if isinstance(vals, Rows) else list(vals)
        if spec.same and all(isinstance(values[x], Batch) for x in spec.outputs):
            for x in spec.outputs:
                values[x].array.setflags(write=False)  # (shared by the iterations)
            self._kept[(id(node), n)] = [values[x] for x in spec.outputs]

    def _used_outside(self) -> Callable[[DataNode, set[int]], bool]:
        """``used(dn, inside)``: whether anything but the operators ``inside`` (their ids)
        takes ``dn``: an operator's input or argument, an output, or (with conditionals,
        whose predicates are not inputs) anything at all."""
        taken: dict[DataNode, set[int]] = {}
        for node in (*self.cpu_ops, *self.gpu_ops):
            for dn in (*node.inputs, *node.arg_nodes.values()):
                taken.setdefault(dn, set()).add(id(node))
        outputs = set(self.outputs)
        scopes = any(n.scope is not None for n in (*self.cpu_ops, *self.gpu_ops))

        def used(dn: DataNode, inside: set[int]) -> bool:
            return scopes or dn in outputs or not taken.get(dn, set()) <= inside

        return used

    def _submit_remote(self, run: RemoteRun, ws: Workspace) -> Pending | None:
        """Send the process-safe part of a run to the sample processes
        (``_sample_processes``): each sample's values from outside the part and its
        parameters. Where no process can be started, the part runs in threads, now and from
        then on, with one warning, and None is returned."""
        takes = [(k, ws.values[dn]) for k, dn in run.takes]
        params = [ws.params[x] for x in run.nodes]
        items = [
            (i, {k: v[i] for k, v in takes}, [None if p is None else p[i] for p in params])
            for i in range(ws.batch_size)
        ]
        alloc = PinnedBlocks(self.gpu_stage.device_id) if self._uploads(run) else None
        try:
            # with a back thread and room for two iterations, the front sends the next one
            # before this one's replies are read: two share the processes (requests())
            in_flight = 2 if self._back and self.capacity() >= 2 else 1
            return self._sample_processes.submit(run, items, alloc, in_flight)
        except HelperStartError as e:
            warnings.warn(
                f"per-sample operators run in threads: no sample process could start ({e})",
                RuntimeWarning,
                stacklevel=2,
            )
            self._remote.clear()
            self._sample_processes = None
            self._back = False
            self._run_samples(run.nodes, ws)
            return None

    def _uploads(self, run: RemoteRun) -> list[DataNode]:
        """The values ``run`` gives back that only ``.gpu()`` copies take outside the part (no
        CPU operator after it, no output; no conditional in the graph; operators inside the
        part, such as NeMo's ``nonsilent_region`` of the audio, ran in the processes). Where
        there is one, the replies are unpacked into pinned memory, and the copies upload those
        values from there with no staging copy (``operators/_copy.py``, ``PinnedSamples``;
        BENCHMARKS.md, "Jasper validation's audio into pinned memory"); the part's other values
        (NeMo's entry indices, a CPU output) are views of the same memory, taken as any
        reply's."""
        if run.uploads is None:
            nodes = (*self.cpu_ops, *self.gpu_ops)
            outputs = {id(dn) for dn in self.outputs}
            run.uploads = []
            if getattr(self.gpu_stage, "device_id", None) is not None and not any(
                n.scope is not None for n in nodes
            ):
                inside = {id(n) for n in run.nodes}
                for dn in run.gives:
                    takers = [
                        n
                        for n in nodes
                        if id(n) not in inside
                        and any(x is dn for x in (*n.inputs, *n.arg_nodes.values()))
                    ]
                    if (
                        takers
                        and id(dn) not in outputs
                        and all(n.op.schema == "_copy_to_gpu" and not n.arg_nodes for n in takers)
                    ):
                        run.uploads.append(dn)
        return run.uploads

    def _collect_remote(self, run: RemoteRun, ws: Workspace, pending: Pending) -> None:
        """The replies of a part :meth:`_submit_remote` sent: the values the rest of the graph
        takes, each sample's skip or the first failure, the operators' times."""
        n = ws.batch_size
        done = pending.result()
        skipped: dict[int, tuple[OpNode, str]] = {}
        failed = None
        times = dict.fromkeys((x.name for x in run.nodes), 0.0)
        counts = dict.fromkeys(times, 0)
        for d in done:
            for i, vals in d.results:
                for dn, v in zip(run.gives, vals, strict=True):
                    ws.values[dn][i] = v
            for i, s, message in d.skipped:
                skipped[i] = (run.nodes[s], message)
            if d.failed is not None and (failed is None or d.failed[0] < failed[0]):
                failed = d.failed
            for x, sec, cnt in zip(run.nodes, d.seconds, d.counts, strict=True):
                times[x.name] += sec
                counts[x.name] += cnt
        self.profiler.add_ops(times, counts, {x.name: (x.op.schema, x.device) for x in run.nodes})
        if failed is not None:
            i, s, exc, kind, message, where = failed
            if exc is None:
                exc = PipelineError(f"{kind}: {message}")
            err = _sample_error(exc, run.nodes[s], i, ws)
            err.add_note(f"In a sample process:\n{where.rstrip()}")
            raise err from None
        if skipped:
            replace_skipped(ws, skipped)
            return
        uploads = run.uploads if pending.alloc is not None else []
        for dn in uploads:  # in pinned blocks, for .gpu() copies alone
            ws.values[dn] = PinnedSamples(ws.values[dn], pending.alloc.spans)
        in_place = {id(dn) for dn in uploads}
        to_dense = [dn for dn in run.gives if dn in self._cpu_outputs and id(dn) not in in_place]
        for dn in to_dense:
            for i in range(n):
                self._to_dense(ws, dn, i)
        self._hand_on_dense(ws, to_dense)

    def _draw(self) -> Workspace:
        """The parameters of the next iteration, drawn in graph order on the stage thread (so
        the stream depends only on the seed), its operators' states right after (the
        checkpoint of that iteration), and the reads of readers that read ahead started."""
        n = None
        params_of: dict[OpNode, list | None] = {}
        for node in self.cpu_ops:  # sources first: their batches set the batch size
            if node.op.provides_batch:
                params_of[node] = batch = _call_source(node, self.batch_size, self._iteration)
                if n is not None and len(batch) != n:
                    raise PipelineError(
                        f"external sources disagree on the batch size ({n} vs {len(batch)} "
                        f"from {node.name!r})"
                    )
                n = len(batch)
        n = self.batch_size if n is None else n
        ws = Workspace(self._iteration, n)
        self._iteration += 1
        source_info: list[str] | None = None
        ws.params = dict.fromkeys(self._paramless)  # (their batch_params: None, not called)
        for node in self._drawing_cpu:
            params = params_of[node] if node in params_of else node.op.batch_params(n)
            if node.op.is_reader and params is not None and len(params) != n:
                raise PipelineError(
                    f"reader {node.name!r} gives {len(params)} samples but an external source "
                    f"gave a batch of {n}; readers need batches of max_batch_size"
                )
            ws.params[node] = params
            if node.op.is_reader and source_info is None and params is not None:
                source_info = [node.op.source_info(p) for p in params]
        ws.source_info = source_info or [""] * n
        for node in self._source_info_ops:  # fn.get_property(key="source_info")
            ws.params[node] = list(ws.source_info)
        for node in self._drawing_gpu:  # their random numbers too, in order, before the snapshot
            ws.params[node] = node.op.batch_params(n)
        if self.snapshot is not None:
            ws.state = self.snapshot()
        for node in self._prefetchers:  # its reads start now, beside the stage's other work
            node.op.prefetch(ws.params[node])
        return ws

    def _run_samples(self, nodes: list[OpNode], ws: Workspace) -> None:
        errors: list[BaseException] = []
        skipped: dict[int, tuple[OpNode, str]] = {}
        indices = iter(range(ws.batch_size))
        to_dense = [dn for n in nodes for dn in n.outputs if dn in self._cpu_outputs]
        prof = self.profiler

        def drain() -> None:
            times = dict.fromkeys((n.name for n in nodes), 0.0)
            counts = dict.fromkeys(times, 0)
            try:
                for i in indices:  # next() on a range iterator is atomic under the GIL
                    if errors:
                        return
                    for node in nodes:
                        start = perf_counter()
                        try:
                            self._run_one(node, i, ws)
                        except SampleSkipped as e:
                            skipped[i] = (node, str(e))
                            break
                        except BaseException as e:
                            errors.append(_sample_error(e, node, i, ws))
                            return
                        end = perf_counter()
                        times[node.name] += end - start
                        counts[node.name] += 1
                        prof.span(node.name, "operator", start, end)
                    else:
                        for dn in to_dense:
                            self._to_dense(ws, dn, i)
            finally:
                prof.add_ops(times, counts, info)

        info = {n.name: (n.op.schema, n.device) for n in nodes}

        if self._pool is None or all(n.op.light for n in nodes):
            # Light operators only (readers, random numbers): per sample they are ~30 us of
            # Python around a syscall, so many threads only fight over the GIL and slow down
            # the GIL-releasing decoders running beside them. Measured on 16 cores: a
            # reader-only stage read 20k files/s on 2 threads and 6k on 16.
            drain()
        else:
            futures = [self._pool.submit(drain) for _ in range(self.num_threads)]
            for f in futures:
                f.result()
        if errors:
            raise errors[0]
        if skipped:
            replace_skipped(ws, skipped)
            return
        self._hand_on_dense(ws, to_dense)

    @staticmethod
    def _hand_on_dense(ws: Workspace, dns) -> None:
        """Each of ``dns`` whose batch buffer every sample filled is handed on as one array
        (``Rows``)."""
        for dn in dns:
            slot = ws.dense.get(dn)
            if slot is not None and not slot.ragged and all(slot.written):
                ws.values[dn] = Rows(ws.values[dn], slot.array)

    def _to_dense(self, ws: Workspace, dn: DataNode, i: int) -> None:
        """Copy sample ``i`` of output ``dn`` into its batch buffer while it is still in cache,
        on the worker that made it, and keep a view of the row. Frameworks take the batch as
        one array; stacking it later would be one large copy on the consumer's thread (157 MB
        per batch of 128 images of 640x640)."""
        value = ws.values[dn][i]
        slot = ws.dense.get(dn)
        if slot is None:
            with self._dense_lock:
                slot = ws.dense.get(dn)
                if slot is None and isinstance(value, np.ndarray):
                    slot = ws.dense[dn] = _DenseBatch(value, ws.batch_size)
        if slot is None or slot.ragged:
            return
        if (
            not isinstance(value, np.ndarray)
            or value.shape != slot.array.shape[1:]
            or (value.dtype != slot.array.dtype)
        ):
            slot.ragged = True
            return
        row = slot.array[i, ...]  # a view, also for 0-d samples
        row[...] = value
        ws.values[dn][i] = row
        slot.written[i] = 1

    @staticmethod
    def _run_one(node: OpNode, i: int, ws: Workspace) -> None:
        values = ws.values
        if node.scope is not None and not node.scope.selects(values, i):
            return  # conditionals: the sample took another branch (its value stays None)
        inputs = tuple(values[x][i] for x in node.inputs)
        args = {k: values[x][i] for k, x in node.arg_nodes.items()}
        params = ws.params[node]
        out = node.op.run_sample(inputs, args, params[i] if params is not None else None)
        if len(node.outputs) == 1:
            values[node.outputs[0]][i] = out[0] if isinstance(out, tuple) else out
        else:
            for dn, v in zip(node.outputs, out, strict=True):
                values[dn][i] = v

    def _finish(self, ws: Workspace | Future) -> tuple[tuple, list | None, list[dict]]:
        """(outputs, operator states after this iteration, its skipped samples)."""
        if isinstance(ws, Future):  # a lane ran its mixed operators
            ws = ws.result()
        if self.gpu_stage is not None:
            start = perf_counter()
            outputs = self.gpu_stage(ws)
            self.profiler.add_stage("gpu", start, perf_counter())
            return outputs, ws.state, ws.skipped
        outputs = tuple(cpu_output(ws, x, self.layouts) for x in self.outputs)
        return outputs, ws.state, ws.skipped
