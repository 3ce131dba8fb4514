"""Per-sample CPU operators in helper processes: which part of a run goes there, and the
processes that run it (their server: ``_sample_server.py``).

The CPU stage runs a run of per-sample operators (``executor._run_samples``) on its thread
pool. Where the run has operators that declare ``process_safe`` (their ``run_sample`` is a
pure function of its inputs, arguments and parameters, and they pickle), :func:`plan` cuts it
in three: the other operators (readers, random numbers, anything in a conditional's branch)
run first, as before, in the pipeline's process; the process-safe ones then run in
:class:`SampleProcesses`, each process taking whole samples through the chain; what takes
their values and stays in the pipeline's process runs last.

Invariants:

* The batches are the same as with threads: parameters are drawn on the stage thread before
  any sample runs (``executor._draw``), and a process only applies them.
* A failure names the operator, the sample and its file as the threads' do (the executor
  raises it); a sample an operator skips is reported as with threads.
* Every process gets every chain before any samples of it (``Chain`` is sent first, on the
  same pipe, and a helper handles messages in order).
* Bytes that lie in a read process's slot (``readers.file``'s) are read there by the
  processes, not copied (``_sample_server.Samples.views``): a request holds its samples, and
  so the slot's lease, until its reply is read; a slot a process cannot map is copied.
* A batch goes to :func:`requests`'s count of processes, the next batch to the next ones.
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
import threading
from dataclasses import dataclass

import numpy as np

from ._ipc.process import HelperError, HelperProcess, HelperStartError, stop_all
from ._ipc.regions import MappedRegions, Region, locate
from ._malloc import in_force as malloc_in_force
from ._sample_server import (
    Chain,
    Packed,
    Samples,
    SamplesDone,
    Step,
    pack,
    unpack,
)
from ._upload_area import UploadArea
from .graph import DataNode, OpNode

_KEYS = itertools.count(1)


@dataclass
class RemoteRun:
    """The process-safe part of a run of per-sample operators.

    Attributes:
        key: the chain's key in the sample processes.
        nodes: its operator nodes, in graph order.
        blob: the pickled :class:`~dlpipe._sample_server.Step` list.
        takes: the DataNodes it takes from outside (key, node), per sample.
        gives: the DataNodes the rest of the graph takes from it, sent back per sample.
        want: their keys.
        uploads: those of ``gives`` that only ``.gpu()`` copies take (the executor works it
            out on first use): where there is one, the replies' arrays are unpacked into
            pinned memory, and the copies upload those from there.
    """

    key: int
    nodes: list[OpNode]
    blob: bytes
    takes: list[tuple[int, DataNode]]
    gives: list[DataNode]
    want: tuple[int, ...]
    uploads: list[DataNode] | None = None


def plan(nodes: list[OpNode], used_outside) -> tuple[list[OpNode], RemoteRun | None, list[OpNode]]:
    """(the nodes that run before, the part for the sample processes or None, the nodes that
    run after) for a run ``nodes`` in graph order. The part takes every process-safe operator
    that does not wait for one that stays after it; what stays runs before it unless it takes
    one of its values (``fn.random.normal(audio)`` of the trimmed audio, say).

    ``used_outside(dn, inside)`` tells whether anything but the nodes whose ids are in
    ``inside`` takes ``dn`` (later operators, the GPU stage, the pipeline's outputs, a
    conditional's predicate).
    """
    before: list[OpNode] = []
    remote: list[OpNode] = []
    after: list[OpNode] = []
    made: set[DataNode] = set()  # by the part
    later: set[DataNode] = set()  # by what runs after it
    for n in nodes:
        deps = (*n.inputs, *n.arg_nodes.values())
        safe = getattr(n.op, "process_safe", False) and n.scope is None and n.op.device == "cpu"
        if safe and not any(dn in later for dn in deps):
            remote.append(n)
            made.update(n.outputs)
        elif any(dn in made or dn in later for dn in deps):
            after.append(n)
            later.update(n.outputs)
        else:
            before.append(n)
    if not any(n.op.holds_gil for n in remote):
        return nodes, None, []
    keys: dict[DataNode, int] = {}

    def key(dn: DataNode) -> int:
        return keys.setdefault(dn, len(keys))

    takes: dict[DataNode, int] = {}  # -> (key, node) pairs
    steps = []
    for n in remote:
        for dn in (*n.inputs, *n.arg_nodes.values()):
            if dn not in made:
                takes.setdefault(dn, key(dn))
        steps.append(
            Step(
                n.op,
                tuple(key(dn) for dn in n.inputs),
                tuple((name, key(dn)) for name, dn in n.arg_nodes.items()),
                tuple(key(dn) for dn in n.outputs),
            )
        )
    try:
        blob = pickle.dumps(steps, protocol=5)
    except Exception:  # an operator holding something that does not pickle: threads it is
        return nodes, None, []
    inside = {id(n) for n in remote}
    gives = [dn for n in remote for dn in n.outputs if used_outside(dn, inside)]
    want = tuple(keys[dn] for dn in gives)
    run = RemoteRun(next(_KEYS), remote, blob, [(k, dn) for dn, k in takes.items()], gives, want)
    return before, run, after


def phases(nodes: list[OpNode], used_outside) -> list[list[OpNode] | RemoteRun] | None:
    """A run ``nodes`` as phases in order: lists of nodes that stay in the pipeline's process,
    and parts for the sample processes (:func:`plan`, again on what runs after each part: the
    Jasper CPU chain is decode..slice, the dither, preemphasis..MFCC). None: no part."""
    before, run, after = plan(nodes, used_outside)
    if run is None:
        return None
    rest = phases(after, used_outside) if after else []
    if after and rest is None:
        rest = [after]
    return [p for p in (before, run, *rest) if not isinstance(p, list) or p]


SHARED_BYTES = 128 << 20  # each process's memfd for requests' and replies' arrays
IN_FLIGHT = 2  # requests a process may hold at once, each with its part of the memfd
# One BLAS thread a process (the user's own settings win): there is a process per core, and
# numpy's OpenBLAS starts threads of its own for a matrix-vector product past ~400k elements
# (nonsilent_region's block sums on utterances over ~29 s), 10-50x slower per row on a busy
# machine (BENCHMARKS.md, "Jasper's CPU chain beside DALI's, on the CPU")
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


MIN_SAMPLES = 2  # samples a request carries at least, where the batch allows (requests())


def requests(samples: int, processes: int, in_flight: int = 1) -> int:
    """How many processes a batch of ``samples`` goes to, ``in_flight`` batches being sent
    before the first one's replies are read: enough that those batches keep every process
    busy (the batches rotate over the processes), no more; and a request per
    ``MIN_SAMPLES`` samples at most.

    Why: each request costs the pipeline's threads GIL-bound Python and system calls at both
    ends (the pipe, the reply's unpacking), which the training loop waits for. Jasper
    validation (``ci/speech_threads_model.py --procs 16``, batch 32, the CPU stage's front and
    back threads: two batches in flight) took per batch 2.3 + 1.8 ms of those threads' CPU at
    16 requests of 2 samples, 1.5 + 1.2 ms at 8 of 4, 1.2 + 0.8 ms at 4 of 8: some 0.18 ms a
    request (a 2-core machine). Fewer than ``processes / in_flight`` leave processes idle
    while the chains' own work is far more (about 1 ms a sample on the H100 for Jasper
    validation, several for NeMo's training chain with resampling).
    ``ci/sample_requests_model.py`` (16 processes, 1 ms a sample, 32 samples) gave, with two
    batches in flight, 6.0 / 5.6 / 7.7 ms a batch at 16 / 8 / 4 requests (sending and reading
    threads: 2.15 / 1.50 / 1.23 ms CPU); with one, 7.9 / 10.4 / 14.4 ms."""
    return min(processes, -(-samples // MIN_SAMPLES), -(-processes // in_flight))


def regions(size: int, slot: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(offset, size) of the request's and the reply's part of request slot ``slot`` in a
    memfd of ``size`` bytes: a quarter of the slot for the samples sent, the rest for the
    values coming back. Arrays that do not fit travel on the pipe."""
    part = size // IN_FLIGHT
    ask = part // 4
    return (slot * part, ask), (slot * part + ask, part - ask)


class _Ticket:
    """One request's reply, once read (``done``): ``value`` or ``error``; ``alloc``: where its
    arrays are unpacked (``_sample_server.unpack``), None for arrays of their own; ``span``:
    the upload area's span reserved for them (``_upload_area.py``), of run ``key``, for a
    request of ``sent`` bytes; ``hold``: what must stay alive until the reply is read (the
    samples whose bytes the process reads in a read process's slot: their views lease it)."""

    __slots__ = ("done", "value", "error", "alloc", "span", "key", "sent", "hold")

    def __init__(self, alloc=None, span=None, key: int = 0, sent: int = 0, hold=None) -> None:
        self.done = False
        self.value = None
        self.error: BaseException | None = None
        self.alloc = alloc
        self.span = span
        self.key = key
        self.sent = sent
        self.hold = hold


class _Line:
    """The pipeline's side of one process: its requests in flight, oldest first.

    Two threads may use a process at once (the CPU stage's front submits the next
    iteration while its back collects this one): ``sending`` orders the requests and bounds
    them to ``IN_FLIGHT``; ``reading`` lets one thread at a time read replies, which come in
    the order of the requests, each unpacked into its ticket at once (so its part of the
    memfd is free again before another request may use it)."""

    def __init__(self, helper: HelperProcess, memory, area: UploadArea | None = None) -> None:
        self.helper = helper
        self.memory = memory
        self.area = area
        self.sending = threading.Lock()
        self.reading = threading.Lock()
        self.tickets: collections.deque[_Ticket] = collections.deque()
        self.sent = 0
        self.mapped = MappedRegions()  # the regions the process maps (_maps)

    def submit(
        self, run: RemoteRun, items: list, alloc=None, shared: int = 0, views: list | None = None
    ) -> _Ticket:
        """Send ``items``; ``shared``: their bytes where the reply may go to the upload area
        (a span is reserved for it, sized from them, when there is room), else 0. ``views``:
        the values that lie in shared regions (:func:`_in_regions`, for ``items``): sent as
        where they lie where the process maps the region, else in ``items`` as any value."""
        with self.sending:
            hold = None
            if views and all(self._maps(region) for _, region, _, _ in views):
                hold, skip = items, {k for k, _, _, _ in views}
                items = [(i, {k: v for k, v in x.items() if k not in skip}, p) for i, x, p in items]
                views = tuple((k, r.key, offsets, sizes) for k, r, offsets, sizes in views)
            else:
                views = ()
            while len(self.tickets) >= IN_FLIGHT:  # the oldest reply frees its region
                self.wait(self.tickets[0])
            ask, answer = regions(len(self.memory), self.sent % IN_FLIGHT)
            # the samples' arrays go into the slot's request part (free: its last request
            # was answered), the rest of them on the pipe: a pipe takes 1 MiB, and a larger
            # request would keep this thread waiting until the process had read it all
            packed = pack(items, self.memory, ask)
            span = self.area.reserve(run.key, shared) if shared and self.area else None
            ticket = _Ticket(alloc, span, run.key, shared, hold)
            self.tickets.append(ticket)  # before the request: a reader may meet its reply
            self.sent += 1
            try:
                self.helper.submit(Samples(run.key, packed, run.want, answer, span, views).wire())
            except BaseException as e:
                ticket.error = e  # the helper failed: it will not answer
                ticket.done = True
                self.tickets.remove(ticket)
                if span is not None:
                    self.area.release(*span)
                raise
            return ticket

    def _maps(self, region: Region) -> bool:
        """Whether the process has mapped ``region`` (asked once per region, the caller
        holding ``sending``: the answer comes after the replies before it, which are read
        into their tickets). Regions gone in the reader (a slot it dropped) are let go of
        when a new one is asked for."""

        def request(message):
            ticket = _Ticket()
            self.tickets.append(ticket)
            try:
                self.helper.submit(message)
            except BaseException as e:
                ticket.error, ticket.done = e, True
                self.tickets.remove(ticket)
                raise
            self.wait(ticket)
            if ticket.error is not None:
                raise ticket.error
            return ticket.value

        return self.mapped.maps(region, self.helper.notify, request)

    def wait(self, ticket: _Ticket) -> None:
        """Read replies until ``ticket``'s has come."""
        with self.reading:
            while not ticket.done:
                oldest = self.tickets[0]
                try:
                    oldest.value = self._read(oldest)
                except BaseException as e:
                    oldest.error = e
                    if not isinstance(e, HelperError):  # interrupted: the helper is failed
                        self._fail_all(e)
                        raise
                oldest.done, oldest.hold = True, None
                self.tickets.popleft()

    def _read(self, ticket: _Ticket):
        """The next reply (``ticket``'s), unpacked (``_sample_server``'s wire tuples): from
        the upload area where the process put it in the span reserved for it, else copied out
        of the memfd (the span is free again). A request cut short (interrupted) keeps its
        span: the process may still write there."""
        span = ticket.span
        try:
            reply = self.helper.result()
        except HelperError:  # a Failed reply: nothing was written to the span
            if span is not None:
                self.area.release(*span)
            raise
        if type(reply) is not tuple:  # (a Map's answer)
            return reply
        body, spans, shared = reply
        if spans is None:  # on the pipe (too large for the memfd)
            if span is not None:
                self.area.release(*span)
            return SamplesDone(*body)
        packed = Packed(body, spans, shared)
        if span is not None:
            self.area.learn(ticket.key, ticket.sent, sum(n for _, n in spans))
            if shared:
                return SamplesDone(*self.area.unpack(packed, span))
            self.area.release(*span)
        return SamplesDone(*unpack(packed, self.memory, ticket.alloc))

    def _fail_all(self, exc: BaseException) -> None:
        while self.tickets:
            t = self.tickets.popleft()
            t.error, t.done, t.hold = t.error or exc, True, None


class Pending:
    """A run submitted to the processes (:meth:`SampleProcesses.submit`): :meth:`result`
    waits for its replies; ``alloc``: the allocator their arrays are unpacked with, or None."""

    def __init__(self, parts: list[tuple[_Line, _Ticket]], alloc=None) -> None:
        self._parts = parts
        self.alloc = alloc

    def result(self) -> list[SamplesDone]:
        """Every process's reply; raises the first HelperError once all were read."""
        done, error = [], None
        for line, ticket in self._parts:  # every reply is read
            line.wait(ticket)
            if ticket.error is not None:
                error = error or ticket.error
            else:
                done.append(ticket.value)
        if error is not None:
            raise error
        return done


class SampleProcesses:
    """``count`` sample processes, started on first use, each with a memfd of
    ``SHARED_BYTES`` for its requests' and replies' arrays (only the pages they touch take
    memory), in ``IN_FLIGHT`` slots, one per request it may hold (:func:`regions`).

    Raises (from :meth:`submit`):
        HelperStartError: they cannot be started here; the caller runs the chain in threads.
    """

    def __init__(self, count: int, area_bytes: int = 0):
        self.count = max(1, count)
        self.area_bytes = area_bytes  # the upload area's size (RuntimeOptions.upload_area_mb)
        self._lines: list[_Line] | None = None
        self._area: UploadArea | None = None
        self._known: set[int] = set()
        self._turn = 0  # the process the next batch's first request goes to
        self._lock = threading.Lock()  # starting, and a chain's first use

    def _start(self) -> list[_Line]:
        if self._lines is not None and any(x.helper.failure for x in self._lines):
            self.stop()  # one failed (a Ctrl-C cut a request in half, it died): start afresh
        if self._lines is None:
            import mmap

            helpers, memory = [], []
            area = UploadArea(self.area_bytes) if self.area_bytes > 0 else None
            more = {"uploads_fd": area.fd, "uploads_size": area.size} if area else {}
            try:
                for _ in range(self.count):
                    fd = os.memfd_create("dlpipe-samples", os.MFD_CLOEXEC)
                    try:
                        os.ftruncate(fd, SHARED_BYTES)
                        memory.append(mmap.mmap(fd, SHARED_BYTES))
                        helpers.append(
                            HelperProcess(
                                "sample process",
                                "dlpipe._sample_server",
                                {
                                    "fd": fd,
                                    "size": SHARED_BYTES,
                                    "malloc_tuning": malloc_in_force(),
                                    **more,
                                },
                                path=True,
                                pass_fds=(fd, area.fd) if area else (fd,),
                                env=ONE_BLAS_THREAD,
                            )
                        )
                    finally:
                        os.close(fd)  # the mapping and the helper's copy keep it
                for h in helpers:
                    h.wait_ready()
            except HelperStartError:
                stop_all(helpers)
                for m in memory:
                    m.close()
                raise
            finally:
                if area is not None:  # the helpers have theirs; the mapping keeps the area
                    area.close_fd()
            self._area = area
            self._lines = [_Line(h, m, area) for h, m in zip(helpers, memory, strict=True)]
        return self._lines

    def submit(self, run: RemoteRun, items: list, alloc=None, in_flight: int = 1) -> Pending:
        """Send ``run`` for ``items`` ((index, values, params) per sample) to
        :func:`requests`'s count of processes (``in_flight``: the batches the caller sends
        before it reads the replies of the first), starting at the one after the last the
        previous batch used; spread over them by size: each sample goes to the request with
        the fewest bytes so far, largest first (input bytes stand for the work: decoding and
        resampling scale with them). Values that lie in a read process's slot are read there
        by the processes (``Samples.views``), not copied. Waits only while a process holds
        ``IN_FLIGHT`` requests. ``alloc(nbytes)``: where each reply's arrays are unpacked,
        one uint8 block a reply (pinned host memory for values only a ``.gpu()`` copy
        takes); None: arrays of their own. Where ``alloc.share(area)`` makes the upload area
        usable (page-locks it), the replies go there first, and are not copied at all
        (``_upload_area.py``)."""
        with self._lock:
            lines = self._start()
            if run.key not in self._known:
                for x in lines:
                    with x.sending:
                        x.helper.notify(Chain(run.key, run.blob))
                self._known.add(run.key)
            count = requests(len(items), len(lines), in_flight)
            first, self._turn = self._turn, (self._turn + count) % len(lines)
        sizes = [_nbytes(x) for x in items]
        bins: list[list[int]] = [[] for _ in range(count)]
        loads = [0] * count
        for j in sorted(range(len(items)), key=sizes.__getitem__, reverse=True):
            b = loads.index(min(loads))
            bins[b].append(j)
            loads[b] += sizes[j]
        located = _in_regions(items)
        share = getattr(alloc, "share", None)
        shared = share is not None and self._area is not None and share(self._area)
        parts = []
        for b, part in enumerate(bins):
            line = lines[(first + b) % len(lines)]
            views = [(k, r, [at[j] for j in part], [n[j] for j in part]) for k, r, at, n in located]
            ticket = line.submit(
                run, [items[j] for j in part], alloc, loads[b] if shared else 0, views
            )
            parts.append((line, ticket))
        return Pending(parts, alloc)

    def run(self, run: RemoteRun, items: list) -> list[SamplesDone]:
        """:meth:`submit`, then its result."""
        return self.submit(run, items).result()

    def stop(self) -> None:
        if self._lines is not None:
            stop_all([x.helper for x in self._lines])
            for x in self._lines:
                x.memory.close()
            self._lines = None
            if self._area is not None:  # unlocked and unmapped once nothing views it
                self._area.retire()
            self._area = None
            self._known.clear()


_BYTES = np.dtype(np.uint8)


def _in_regions(items: list) -> list[tuple[int, Region, list[int], list[int]]]:
    """``(value key, region, offsets, sizes)`` of each value whose arrays (1-D uint8) all lie
    in one shared region (``_ipc.regions``: a read process's slot, ``readers.file``'s bytes):
    their offsets in it and sizes, one per item."""
    out = []
    if not items:
        return out
    for k, v in items[0][1].items():
        if type(v) is not np.ndarray or v.dtype != _BYTES or v.ndim != 1:
            continue
        column = [x[1].get(k) for x in items]
        if all(type(a) is np.ndarray and a.dtype == _BYTES and a.ndim == 1 for a in column):
            found = locate(column)
            if found is not None:
                out.append((k, found[0], found[1], [a.nbytes for a in column]))
    return out


def _nbytes(item) -> int:
    return sum(v.nbytes for v in item[1].values() if isinstance(v, np.ndarray)) + 1
