"""``_ipc.slots``: one free list for every recycled buffer. Each user's invariant, on the host:
memory goes back when the last view of it is gone, and is handed out again only once the event
that came with it is done."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np

from dlpipe._ipc.slots import SlotPool


class _Event:
    """A CUDA event's two calls: ``done`` and ``synchronize()``."""

    def __init__(self, done: bool = False):
        self.done, self.waited = done, False

    def synchronize(self):
        self.waited = self.done = True


def test_read_slots_come_back_when_the_last_view_of_the_batch_is_gone():
    # read slots: the lease's holder is the batch's base array; its views keep it alive
    pool = SlotPool()
    memory = bytearray(100)
    base = np.frombuffer(memory, np.uint8)
    pool.lease("slot0", holder=base)
    samples = [base[0:10], base[10:40]]
    del base
    view = samples[1][5:8]
    del samples
    gc.collect()
    assert len(pool) == 0  # a view of a sample still holds the slot
    del view
    assert pool.free_slots() == ["slot0"] and pool.take() == "slot0" and len(pool) == 0


def test_device_slots_are_handed_out_only_after_their_event_and_ready_ones_first():
    # device slots: released with an event recorded on the lane's stream (the GPU operators
    # that read the batch); the oldest whose event is done is taken first
    pool = SlotPool()
    pending, done = _Event(done=False), _Event(done=True)
    a, b = pool.lease("a", on_release=lambda: pending), pool.lease("b", on_release=lambda: done)
    del a, b  # a lease without a holder ends with the lease itself
    gc.collect()
    assert pool.free_slots() == ["a", "b"] and pool.waiting() == 1
    assert pool.take(ready_only=True) == "b" and not pending.waited
    assert pool.take(ready_only=True) is None  # only a slot whose work is still queued
    assert pool.take() == "a" and pending.waited  # taken once its event is done
    assert pool.take() is None


def test_a_lease_ends_once_explicitly_or_by_its_holder():
    pool = SlotPool()
    calls = []
    holder = np.zeros(3)
    lease = pool.lease(7, holder=holder, on_release=lambda: calls.append(1))
    lease.release()
    lease.release()
    del holder
    gc.collect()
    assert calls == [1] and pool.free_slots() == [7] and not lease.alive


def test_slots_too_small_are_dropped_when_met_and_put_returns_an_unused_one():
    # read and device slots grow: a free slot smaller than what is needed now leaves for good
    dropped = []
    pool = SlotPool(drop=dropped.append)
    for size in (10, 40, 20, 35):
        pool.put(size)
    assert pool.take(accept=lambda s: s >= 30) == 40
    assert dropped == [10, 20] and pool.free_slots() == [35]  # each free slot looked at
    pool.put(40)  # taken, then not used after all
    pool.clear()
    assert dropped == [10, 20, 35, 40] and len(pool) == 0


def test_spare_images_beyond_the_cap_are_dropped_and_are_taken_k_at_a_time():
    # nvImageCodec's spare images: no event (the next decode into them is on the same
    # stream, after the GPU operators that read them); at most ``keep`` kept
    pool = SlotPool(keep=3)
    for lease in [pool.lease(f"img{i}") for i in range(5)]:
        lease.release()
    assert pool.free_slots() == ["img0", "img1", "img2"]  # the last two were dropped
    assert pool.take_many(4) is None and len(pool) == 3  # not enough: none taken
    assert pool.take_many(2) == ["img0", "img1"] and pool.free_slots() == ["img2"]


def test_sessions_wait_for_one_to_come_back_and_the_preferred_is_taken_first():
    # NVDEC sessions: several threads take (wait=True) and put back explicitly; a session
    # that has the file open already is preferred, else the least recently used
    pool = SlotPool()

    class Session:
        def __init__(self, path):
            self.path = path

    s1, s2 = Session("a.mp4"), Session("b.mp4")
    pool.put(s1)
    pool.put(s2)
    assert pool.take(prefer=lambda s: s.path == "b.mp4", wait=True) is s2
    assert pool.take(prefer=lambda s: s.path == "c.mp4", wait=True) is s1  # the oldest
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.take(wait=True)))
    waiter.start()
    time.sleep(0.05)
    assert waiter.is_alive() and not got  # none free: it waits
    pool.put(s2)
    waiter.join(timeout=5)
    assert got == [s2]


def test_a_release_from_a_finalizer_inside_a_take_neither_deadlocks_nor_is_lost():
    # the garbage collector may run a lease's finalizer while this thread is inside take()
    pool = SlotPool()
    lease = pool.lease("late")

    def accept(slot):
        nonlocal lease
        if lease is not None:
            lease = None  # ends it here, mid-take: it lands on the free list at once
            gc.collect()
        return True

    pool.put("first")
    assert pool.take(accept=accept, wait=True) == "first"
    assert pool.free_slots() == ["late"]
