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
"""

from __future__ import annotations

import itertools
import os
import pickle
from dataclasses import dataclass

import numpy as np

from ._ipc.process import HelperError, HelperProcess, HelperStartError, stop_all
from ._sample_server import Chain, Samples, SamplesDone, Step, unpack
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
    """

    key: int
    nodes: list[OpNode]
    blob: bytes
    takes: list[tuple[int, DataNode]]
    gives: list[DataNode]
    want: tuple[int, ...]


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


REPLY_BYTES = 64 << 20  # each process's memfd for its replies' arrays; larger ones use the pipe


class SampleProcesses:
    """``count`` sample processes, started on first use, each with a memfd of
    ``REPLY_BYTES`` for its replies' arrays (only the pages a reply touches take memory).

    Raises (from :meth:`run`):
        HelperStartError: they cannot be started here; the caller runs the chain in threads.
    """

    def __init__(self, count: int):
        self.count = max(1, count)
        self._helpers: list[HelperProcess] | None = None
        self._memory: list = []  # each helper's memfd, mapped
        self._known: set[int] = set()

    def _start(self) -> list[HelperProcess]:
        if self._helpers is not None and any(h.failure for h in self._helpers):
            self.stop()  # one failed (a Ctrl-C cut a request in half, it died): start afresh
        if self._helpers is None:
            import mmap

            helpers, memory = [], []
            try:
                for _ in range(self.count):
                    fd = os.memfd_create("dlpipe-samples", os.MFD_CLOEXEC)
                    try:
                        os.ftruncate(fd, REPLY_BYTES)
                        memory.append(mmap.mmap(fd, REPLY_BYTES))
                        helpers.append(
                            HelperProcess(
                                "sample process",
                                "dlpipe._sample_server",
                                {"fd": fd, "size": REPLY_BYTES},
                                path=True,
                                pass_fds=(fd,),
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
            self._helpers, self._memory = helpers, memory
        return self._helpers

    def run(self, run: RemoteRun, items: list) -> list[SamplesDone]:
        """Run ``run`` for ``items`` ((index, values, params) per sample), spread over the
        processes by size: each sample goes to the process with the fewest bytes so far,
        largest first (input bytes stand for the work: decoding and resampling scale with
        them)."""
        helpers = self._start()
        if run.key not in self._known:
            for h in helpers:
                h.notify(Chain(run.key, run.blob))
            self._known.add(run.key)
        bins: list[list] = [[] for _ in range(min(len(helpers), len(items)))]
        loads = [0] * len(bins)
        for size, item in sorted(((_nbytes(x), x) for x in items), key=lambda p: -p[0]):
            b = loads.index(min(loads))
            bins[b].append(item)
            loads[b] += size
        used = helpers[: len(bins)]
        for h, part in zip(used, bins, strict=True):
            h.submit(Samples(run.key, part, run.want))
        done, error = [], None
        for h, memory in zip(used, self._memory, strict=False):  # every reply is read
            try:
                done.append(unpack(h.result(), memory))
            except HelperError as e:
                error = error or e
        if error is not None:
            raise error
        return done

    def stop(self) -> None:
        if self._helpers is not None:
            stop_all(self._helpers)
            self._helpers = None
            self._known.clear()
        for m in self._memory:
            m.close()
        self._memory = []


def _nbytes(item) -> int:
    return sum(v.nbytes for v in item[1].values() if isinstance(v, np.ndarray)) + 1
