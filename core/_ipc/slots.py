"""Recycled buffers: :class:`SlotPool` and :class:`Lease`.

A *slot* is anything made once and handed out many times: a read process's share of its memfd,
a device buffer that a decode process copies images into, an image nvImageCodec decodes into
again, an NVDEC session. The rule is the same for all of them:

    A slot goes back to the free list when its lease ends: ``Lease.release()``, or the last
    reference to the lease's holder is gone (the batch and every view of it), whichever comes
    first, once. It comes back with the event ``on_release`` returned then (the GPU work queued
    so far that may still read it), and it is handed out again only once that event is done.

So memory that a batch (or a view of one, held by the user or by a decoder still reading it)
refers to is never written into, and memory the GPU may still read is never written into
before the GPU is done. Each user writes what the event stands for in its own docstring.

Thread safety: slots come back from any thread (a finalizer runs where the last reference is
dropped, the garbage collector's thread too) by appending to a deque, which takes no lock (a
finalizer that waited for a lock held by the thread it interrupted would never return). A pool
that one thread takes from (read slots, device slots, spare images) takes without a lock; a
pool that several threads take from (NVDEC sessions) takes with ``wait=True``, one thread at a
time under a re-entrant lock, and is woken by the releases (explicit ``put``).
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

S = TypeVar("S")


class Event(Protocol):
    """What ``on_release`` returns: a CUDA event, or anything with ``done`` and
    ``synchronize()``."""

    @property
    def done(self) -> bool: ...

    def synchronize(self) -> None: ...


class Lease:
    """One slot handed out. Ends once: ``release()``, or when ``holder`` (the lease itself when
    none was given) is collected."""

    __slots__ = ("slot", "__weakref__", "_end")

    def __init__(self, pool: SlotPool, slot, holder, on_release):
        self.slot = slot
        self._end = weakref.finalize(
            self if holder is None else holder, pool._give_back, slot, on_release
        )
        self._end.atexit = False  # at interpreter exit nothing needs its slot back

    def release(self) -> None:
        """End the lease now (idempotent)."""
        self._end()

    @property
    def alive(self) -> bool:
        return self._end.alive


class SlotPool(Generic[S]):
    """A free list of slots (see the module doc).

    Args:
        drop: called with a slot that leaves the pool for good (too small, beyond ``keep``,
            or ``clear()``); None: the slot is just forgotten.
        keep: the most free slots kept; one more that comes back is dropped instead.
    """

    def __init__(self, drop: Callable[[S], Any] | None = None, keep: int | None = None):
        self.drop = drop
        self.keep = keep
        self._free: collections.deque = collections.deque()  # (slot, event), oldest first
        self._cond = threading.Condition(threading.RLock())
        self._waiting = 0  # threads in take(wait=True)

    # --- handing out --------------------------------------------------------------------
    def lease(
        self, slot: S, holder: object = None, on_release: Callable[[], Event | None] | None = None
    ) -> Lease:
        """Hand ``slot`` out (a new one, or one just taken). ``holder``: the object whose
        collection ends the lease (the lease itself when None). ``on_release``: called when
        the lease ends, on that thread; returns the event the slot waits for, or None."""
        return Lease(self, slot, holder, on_release)

    def take(
        self,
        *,
        accept: Callable[[S], bool] | None = None,
        prefer: Callable[[S], bool] | None = None,
        ready_only: bool = False,
        wait: bool = False,
    ) -> S | None:
        """A free slot, oldest first, or None when there is none.

        Args:
            accept: slots it refuses are dropped (too small for what is needed now).
            prefer: the first free slot it accepts is taken before older ones.
            ready_only: only a slot whose event is done; else the oldest one, after waiting
                for its event.
            wait: with none free, wait until one comes back (slots released explicitly).
        """
        if not wait:
            return self._take(accept, prefer, ready_only)
        with self._cond:  # several threads take: one at a time, so none sees a slot in hand
            while True:
                slot = self._take(accept, prefer, ready_only)
                if slot is not None:
                    return slot
                self._waiting += 1  # before looking again: a release then notifies
                try:
                    if not self._free:
                        self._cond.wait()
                finally:
                    self._waiting -= 1

    def _take(self, accept, prefer, ready_only) -> S | None:
        looked: list = []  # taken off the deque; all but the one handed out go back in order
        pick = None  # its index in ``looked``
        try:
            for _ in range(len(self._free)):  # each slot free now, once
                try:
                    slot, event = self._free.popleft()
                except IndexError:  # taken by another thread (take(wait=True) users)
                    break
                if accept is not None and not accept(slot):
                    self._drop(slot)
                    continue
                looked.append((slot, event))
                if prefer is not None and prefer(slot):
                    pick = len(looked) - 1
                    break
            if pick is None:
                done = [i for i, (_, ev) in enumerate(looked) if ev is None or ev.done]
                pick = done[0] if done else (0 if looked and not ready_only else None)
            found = looked.pop(pick) if pick is not None else None
        finally:
            self._free.extendleft(reversed(looked))
        if found is None:
            return None
        slot, event = found
        if event is not None and not event.done:
            event.synchronize()
        return slot

    def take_many(self, k: int) -> list[S] | None:
        """``k`` free slots at once, or None (and none taken) when fewer are free. For a pool
        one thread takes from (others only give back), as a decode lane's spare images."""
        if k <= 0 or len(self._free) < k:
            return None
        taken = [self._free.popleft() for _ in range(k)]
        for _, event in taken:
            if event is not None and not event.done:
                event.synchronize()
        return [slot for slot, _ in taken]

    # --- coming back --------------------------------------------------------------------
    def put(self, slot: S, event: Event | None = None) -> None:
        """Add ``slot`` to the free list: a new one, or one taken and not used."""
        self._free.append((slot, event))
        if self._waiting:
            with self._cond:
                self._cond.notify()

    def _give_back(self, slot: S, on_release) -> None:
        """A lease ended: ``slot`` goes back, with its event (runs on any thread)."""
        try:
            event = on_release() if on_release is not None else None
        except Exception:  # interpreter shutdown: CUDA is going away; nothing will use it
            return
        if self.keep is not None and len(self._free) >= self.keep:
            self._drop(slot)
        else:
            self._free.append((slot, event))  # atomic: safe from any thread, without a lock
        if self._waiting:
            with self._cond:
                self._cond.notify()

    def _drop(self, slot: S) -> None:
        if self.drop is not None:
            self.drop(slot)

    def clear(self) -> None:
        """Drop every free slot, once its event is done (leased ones come back later)."""
        while True:
            try:
                slot, event = self._free.popleft()
            except IndexError:
                return
            if event is not None and not event.done:
                event.synchronize()
            self._drop(slot)

    def __len__(self) -> int:
        """Free slots (their events done or not)."""
        return len(self._free)

    def waiting(self) -> int:
        """Free slots whose event is not done yet."""
        return sum(1 for _, ev in list(self._free) if ev is not None and not ev.done)

    def free_slots(self) -> list[S]:
        """The free slots, oldest first (a snapshot)."""
        return [slot for slot, _ in list(self._free)]
