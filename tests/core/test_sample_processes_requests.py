"""The sample processes' requests (``_sample_processes.py``): bytes that lie in a read
process's slot are read there by the process, not copied (and copied where they cannot be);
a batch goes to as many processes as ``requests`` says, the first one rotating."""

from __future__ import annotations

import dataclasses
import mmap
import os
import pickle

import numpy as np
import pytest
from sample_ops import Half, Reverse
from test_sample_processes import assert_same_batches, batches, jasper_like, speech  # noqa: F401

import dlpipe._sample_processes as sp
from dlpipe._ipc import process as ipc_process
from dlpipe._ipc import regions
from dlpipe._ipc.regions import Map, Unmap, share, unshare
from dlpipe._sample_processes import RemoteRun
from dlpipe._sample_server import Packed, Samples, Step

pytestmark = pytest.mark.skipif(not ipc_process.supported(), reason="helpers need Linux memfd")


class _Slot:
    """A memfd mapped and shared as a read process shares its slots, with ``n`` samples of
    random bytes in it (views of the mapping, as ``ReadProcess.read`` gives them)."""

    def __init__(self, n: int, seed: int, size: int = 1 << 20) -> None:
        self.fd = os.memfd_create("test-slot", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.memory = mmap.mmap(self.fd, size)
        self.region = share(self.memory, self.fd)
        rng = np.random.default_rng(seed)
        base = np.frombuffer(self.memory, np.uint8)
        self.samples, pos = [], 64
        for _ in range(n):
            k = int(rng.integers(1, 5000))
            base[pos : pos + k] = rng.integers(0, 256, k, dtype=np.uint8)
            self.samples.append(base[pos : pos + k])
            pos += k + int(rng.integers(0, 100))

    def close(self) -> None:
        unshare(self.memory)
        os.close(self.fd)


def _run(key: int) -> RemoteRun:
    return RemoteRun(key, [], pickle.dumps([Step(Reverse(), (0,), (), (1, 2))]), [], [], (1, 2))


def _message(m):
    """A message as sent, requests for samples as :class:`Samples` again."""
    return Samples.from_wire(m) if type(m) is tuple else m


def _spy(procs: sp.SampleProcesses) -> list:
    sent = []
    for line in procs._lines:
        submit, notify = line.helper.submit, line.helper.notify
        line.helper.submit = lambda m, s=submit: (sent.append(_message(m)), s(m))
        line.helper.notify = lambda m, s=notify: (sent.append(m), s(m))
    return sent


def _check(done: list, samples: list, mapped: bool) -> None:
    got = {i: v for d in done for i, v in d.results}
    assert sorted(got) == list(range(len(samples)))
    for i, (back, in_region) in got.items():
        np.testing.assert_array_equal(back, samples[i][::-1])
        assert bool(in_region) is mapped


def test_bytes_in_a_read_slot_are_read_there():
    """Samples whose bytes lie in a shared slot go as (region, offsets, sizes): the process
    maps the slot once and reads them there (none of their bytes in the request); the replies
    are the samples' own bytes. Bytes elsewhere are copied, as before."""
    slot = _Slot(12, seed=1)
    procs = sp.SampleProcesses(3)
    try:
        procs.run(_run(990), [(0, {0: np.zeros(3, np.uint8)}, [None])])  # started
        sent = _spy(procs)
        for _ in range(2):
            items = [(i, {0: a}, [None]) for i, a in enumerate(slot.samples)]
            _check(procs.run(_run(990), items), slot.samples, mapped=True)
        maps = [m for m in sent if isinstance(m, Map)]
        assert len(maps) == 3 and {m.key for m in maps} == {slot.region.key}  # once a process
        requests = [m for m in sent if isinstance(m, Samples)]
        assert requests and all(m.views and m.views[0][1] == slot.region.key for m in requests)
        assert all(isinstance(m.items, Packed) and not m.items.spans for m in requests)
        assert sum(len(m.views[0][2]) for m in requests) == 24
        # the requests held the samples (the slot's lease) until their replies were read
        assert all(not t.hold for x in procs._lines for t in x.tickets)

        own = [a.copy() for a in slot.samples]  # not in a shared region: copied
        del sent[:]
        _check(procs.run(_run(990), [(i, {0: a}, [None]) for i, a in enumerate(own)]), own, False)
        assert all(not m.views for m in sent if isinstance(m, Samples))
    finally:
        procs.stop()
        slot.close()


def test_a_region_the_process_cannot_map_is_copied(monkeypatch):
    """A slot the process cannot open (here: its path names nothing) is copied, and asked
    for once; a slot gone in the reader is let go of in the processes."""
    slot = _Slot(6, seed=2)
    procs = sp.SampleProcesses(1)
    try:
        items = [(i, {0: a}, [None]) for i, a in enumerate(slot.samples)]
        procs.run(_run(991), items[:1])
        sent = _spy(procs)
        (line,) = procs._lines
        assert line.mapped.answers == {slot.region.key: True}
        unshare(slot.memory)  # the reader dropped the slot: the process unmaps it
        other = _Slot(6, seed=3)
        bad = dataclasses.replace(other.region, path="/proc/self/fd/99999")
        monkeypatch.setitem(regions._REGIONS, other.memory, bad)
        try:
            items = [(i, {0: a}, [None]) for i, a in enumerate(other.samples)]
            for _ in range(2):
                _check(procs.run(_run(991), items), other.samples, mapped=False)
            assert [type(m) for m in sent].count(Map) == 1
            assert [m.key for m in sent if isinstance(m, Unmap)] == [slot.region.key]
            assert line.mapped.answers == {bad.key: False}
        finally:
            other.close()
    finally:
        procs.stop()
        slot.close()


def test_file_bytes_go_by_their_slot_in_the_jasper_chain(speech, monkeypatch):  # noqa: F811
    """readers.file -> decoders.audio -> nonsilent_region -> slice: every request carries the
    files' bytes as where they lie in the read slot, and the batches are the threads'."""
    submitted = []
    submit = sp._Line.submit

    def spy(self, *args, **kw):
        ticket = submit(self, *args, **kw)
        submitted.append(ticket.hold is not None)
        return ticket

    want = batches(jasper_like(speech, False), 3)
    monkeypatch.setattr(sp._Line, "submit", spy)
    pipe = jasper_like(speech, True)
    assert pipe._executor._sample_processes is not None
    assert_same_batches(want, batches(pipe, 3))
    assert submitted and all(submitted)


def test_requests_per_batch():
    """Enough requests that the batches in flight keep every process busy, no more; at most
    one per MIN_SAMPLES samples and per process."""
    k = sp.MIN_SAMPLES
    assert sp.requests(0, 16) == 0
    assert sp.requests(1, 16) == 1 and sp.requests(1, 16, 2) == 1
    assert sp.requests(k, 16) == 1 and sp.requests(k + 1, 16) == 2
    assert sp.requests(32, 16) == min(16, 32 // k)  # one batch at a time: every process
    assert sp.requests(32, 16, 2) == 8  # Jasper's front and back: two batches, 4 samples each
    assert sp.requests(32, 15, 2) == 8 and sp.requests(1000, 16, 2) == 8
    assert sp.requests(1000, 16) == 16 and sp.requests(1000, 1) == 1 and sp.requests(9, 1, 2) == 1


def test_batches_rotate_over_the_processes_largest_first(monkeypatch):
    """Each batch starts at the process after the last one the batch before used, so every
    process takes its share; in a batch the samples go largest first to the least loaded
    request."""
    monkeypatch.setattr(sp, "MIN_SAMPLES", 2)
    run = RemoteRun(992, [], pickle.dumps([Step(Half(), (0,), (), (1,))]), [], [], (1,))
    procs = sp.SampleProcesses(3)
    try:
        procs.run(run, [(0, {0: np.zeros(1)}, [None])])  # process 0
        users = []
        for _ in range(3):
            before = [x.sent for x in procs._lines]
            sizes = [1, 9, 4, 6]  # -> requests [9, 1], [6, 4]
            items = [(i, {0: np.zeros(n)}, [None]) for i, n in enumerate(sizes)]
            done = procs.run(run, items)
            users.append([j for j, x in enumerate(procs._lines) if x.sent > before[j]])
            assert [[i for i, _ in d.results] for d in done] == [[1, 0], [3, 2]]
        assert users == [[1, 2], [0, 1], [0, 2]]  # starts 1, 0 (3 % 3), 2
    finally:
        procs.stop()


def test_replies_arrays_pickle_plainly_and_come_back_the_same():
    """A reply's arrays of numbers pickle as ``np.ndarray(shape, dtype, buffer)``; what comes
    back (type, dtype, shape, strides, values, writability) is what numpy's own pickling
    gives, for those and for the arrays that keep numpy's (strided, strings, objects, dates,
    records, subclasses, scalars)."""
    from dlpipe._sample_server import _plain_array, pack, unpack

    frozen = np.arange(5.0)
    frozen.setflags(write=False)
    values = [
        np.arange(7, dtype=np.float32),
        np.array(3.5),
        np.zeros(0, np.int16),
        np.arange(12, dtype=">i4").reshape(3, 4),
        np.zeros((2, 3), bool),
        np.ones(3, np.complex64),
        frozen,
        np.arange(12).reshape(3, 4).T,
        np.array(["ab", "c"]),
        np.array([1, "x"], object),
        np.array(["2020-01-01"], "M8[ns]"),
        np.zeros(3, [("a", "f4")]),
        np.ma.array([1, 2]),
        np.float32(2),
    ]
    assert _plain_array(values[0])[0] is np.ndarray
    assert _plain_array(values[7])[0] is not np.ndarray  # strided: numpy's
    memory = mmap.mmap(-1, 1 << 16)
    plain = unpack(pack(values, memory, plain=True), memory)
    own = unpack(pack(values, memory), memory)
    for a, b, want in zip(plain, own, values, strict=True):
        assert type(a) is type(b) is type(want)
        if isinstance(want, np.ndarray):
            assert a.dtype == b.dtype == want.dtype and a.shape == b.shape == want.shape
            assert a.strides == b.strides and a.flags.writeable == b.flags.writeable
            if want.dtype.kind != "O":
                np.testing.assert_array_equal(a, want)


def test_a_region_asked_for_behind_requests_in_flight():
    """The process is asked to map a slot while it still holds requests: their replies are
    read first, into their own tickets, and every batch gets its own samples back."""
    slot = _Slot(5, seed=4)
    procs = sp.SampleProcesses(1)
    try:
        procs.run(_run(993), [(0, {0: np.zeros(3, np.uint8)}, [None])])
        own = [np.full(1000 + i, i, np.uint8) for i in range(5)]
        first = procs.submit(_run(993), [(i, {0: a}, [None]) for i, a in enumerate(own)])
        second = procs.submit(_run(993), [(i, {0: a}, [None]) for i, a in enumerate(slot.samples)])
        (line,) = procs._lines
        assert line.mapped.answers == {slot.region.key: True}
        _check(second.result(), slot.samples, mapped=True)
        _check(first.result(), own, mapped=False)
    finally:
        procs.stop()
        slot.close()
