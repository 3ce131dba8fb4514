"""The upload area (``_upload_area.py``): its spans are reserved and freed without overlap, a
reply's arrays are views of it until they are collected, and a reply that does not fit its
span goes to the process's memfd, as any reply."""

from __future__ import annotations

import gc
import mmap
import os

import numpy as np
import pytest

from dlpipe._ipc import process as ipc_process
from dlpipe._sample_server import Packed, Samples, Server, Step, pack
from dlpipe._upload_area import UploadArea

pytestmark = pytest.mark.skipif(not ipc_process.supported(), reason="needs Linux memfd")


def test_spans_never_overlap_and_merge_when_freed():
    area = UploadArea(1 << 20)
    area.close_fd()
    rng = np.random.default_rng(0)
    held: list[tuple[int, int]] = []
    for _ in range(2000):
        if held and rng.random() < 0.5:
            area.release(*held.pop(int(rng.integers(len(held)))))
        else:
            span = area.reserve(1, int(rng.integers(1, 20_000)))
            if span is not None:
                held.append(span)
        spans = sorted(held)
        assert all(a[0] + a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
        assert all(o % 256 == 0 and o + n <= area.size for o, n in spans)
        assert area.free_bytes() == area.size - sum(n for _, n in held)
    for span in held:
        area.release(*span)
    assert area._starts == [0] and area._ends == [area.size]  # one span again


def test_reservations_follow_the_replies_and_none_when_full():
    area = UploadArea(1 << 20)
    area.close_fd()
    first = area.reserve(7, 1000)
    assert first[1] >= 4 * 1000  # before any reply: room for decoded PCM and more
    area.learn(7, 1000, 2000)
    assert area.reserve(7, 1000)[1] < first[1]
    assert area.reserve(7, 10 << 20) is None  # no room: the reply goes the usual way


def test_reply_arrays_view_the_area_until_collected():
    area = UploadArea(1 << 20)
    area.close_fd()
    span = area.reserve(1, 50_000)
    values = [np.arange(n, dtype=np.float32) for n in (1000, 3000, 7)]
    packed = pack(values, area.memory, span)
    got = area.unpack(packed, span)
    assert area.free_bytes() < area.size  # the arrays' part stays reserved
    used = area.size - area.free_bytes()
    assert used < span[1]  # the tail is free at once
    for x, y in zip(got, values, strict=True):
        np.testing.assert_array_equal(x, y)
        assert np.shares_memory(x, np.frombuffer(area.memory, np.uint8))
    del x, y, got
    gc.collect()
    assert area.free_bytes() == area.size


def test_server_puts_replies_in_the_area_when_they_fit(tmp_path):
    fd = os.memfd_create("t", 0)
    os.ftruncate(fd, 1 << 20)
    area = UploadArea(1 << 20)
    server = Server(fd, 1 << 20, False, area.fd, area.size)
    area.close_fd()
    server.chains[1] = [Step(_Twice(), (0,), (), (1,))]
    items = [(0, {0: np.ones(1000, np.float32)}, [None])]
    small = area.reserve(1, 100)
    reply = server.handle(Samples(1, items, (1,), (0, 1 << 20), small))
    assert isinstance(reply, Packed) and reply.shared
    assert all(small[0] <= o and o + n <= small[0] + small[1] for o, n in reply.spans)
    tiny = (small[0] + small[1], 256)
    reply = server.handle(Samples(1, items, (1,), (0, 1 << 20), tiny))
    assert isinstance(reply, Packed) and not reply.shared  # did not fit: the memfd
    memory = mmap.mmap(fd, 1 << 20)
    os.close(fd)
    from dlpipe._sample_server import SamplesDone, unpack

    done = SamplesDone(*unpack(reply, memory))  # (a plain tuple in the reply: no class to load)
    np.testing.assert_array_equal(done.results[0][1][0], 2 * np.ones(1000))


class _Twice:
    def run_sample(self, inputs, args, params):
        return inputs[0] * 2


def test_unlock_waits_for_the_processes_and_the_last_view():
    """The registration is undone once, after the processes stopped and the last array viewing
    the area was collected (a copy may read it until then), with the mapping still there."""
    area = UploadArea(1 << 20)
    area.close_fd()
    calls = []
    area.unlock = lambda: calls.append(np.frombuffer(area.memory, np.uint8, 4).sum())
    span = area.reserve(1, 1000)
    got = area.unpack(pack([np.ones(100, np.uint8)], area.memory, span), span)
    area.retire()
    assert calls == []  # a view is alive
    del got
    gc.collect()
    assert len(calls) == 1 and area.unlock is None
    area.retire()
    assert len(calls) == 1
    other = UploadArea(1 << 16)
    other.close_fd()
    other.unlock = lambda: calls.append("other")
    other.retire()  # nothing views it: at once
    assert calls[-1] == "other"


def test_a_block_collected_while_the_lock_is_held_is_freed_later():
    """A collection may run a block's finalizer anywhere, also inside the area's own locked
    code on the same thread: the span is queued, not waited for (which would never end)."""
    area = UploadArea(1 << 20)
    area.close_fd()
    span = area.reserve(1, 1000)
    got = area.unpack(pack([np.ones(100, np.uint8)], area.memory, span), span)
    held = area.size - area.free_bytes()
    with area.lock:
        del got
        gc.collect()  # the finalizer runs here, the lock held by this thread
    assert held > 0 and area.free_bytes() == area.size
