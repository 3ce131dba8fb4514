"""The upload area: one memfd the sample processes write the replies of ``.gpu()``-only values
into, page-locked in the pipeline's process, so a ``.gpu()`` copy uploads them from where the
process wrote them, with no copy on the pipeline's side (``_sample_processes.py``,
``operators/_copy.py``: ``PinnedBlocks.share``).

Why: Jasper validation's trimmed audio is 16 MB a batch; unpacking it out of the processes'
memfd was the CPU stage's back thread's main work (BENCHMARKS.md, "Jasper validation's audio
into pinned memory").

How: each request of such a run reserves a span of the area, sized from the bytes it sends
(the reply's bytes per byte sent, learnt per run); the process packs its reply there when it
fits, else into its own memfd as any reply. Once read, the reply's arrays are views of the
area; the span's unused tail is free again at once, and the rest when the last view is
collected (the ``.gpu()`` copy holds its samples until the copy has passed). Nothing ever
waits for room: a request that finds none is answered the usual way, so the area adds no wait
and no deadlock to the requests' slots.
"""

from __future__ import annotations

import bisect
import collections
import mmap
import os
import pickle
import threading
import weakref

import numpy as np

_ALIGN = 256
_FIRST_RATIO = 4.0  # reply bytes per byte sent, before a run's first reply (decoded PCM: 2)
_SLACK = 64 << 10


class UploadArea:
    """The area's memfd ``fd`` (for the processes) and its mapping here, with a first-fit
    allocator of its spans. ``address``: where the mapping lies; ``usable``: page-locked (set
    by whoever registers it, ``operators/_copy.py``, with ``unlock`` to undo it).

    Once the processes are stopped (:meth:`retire`) and the last array viewing the area is
    collected, ``unlock`` runs, while the mapping is still there (it goes with this object:
    ``mmap`` unmaps before it calls its weak references back)."""

    def __init__(self, size: int) -> None:
        self.fd = os.memfd_create("dlpipe-uploads", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.size = size
        self.memory = mmap.mmap(self.fd, size)
        self.address = np.frombuffer(self.memory, np.uint8, 1).ctypes.data
        self.usable = False
        self.tried = False  # registration was tried (once)
        self.unlock = None  # undoes the registration
        self._live = 0  # blocks of replies not yet collected
        self._dropped: collections.deque = collections.deque()  # collected, not yet freed
        self._retired = False
        self.lock = threading.Lock()
        self._starts = [0]  # free spans, sorted, disjoint, not adjacent
        self._ends = [size]
        self._ratio: dict[int, float] = {}

    def close_fd(self) -> None:
        """The processes have their copies: the mapping keeps the area."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def reserve(self, key: int, sent: int) -> tuple[int, int] | None:
        """A span (offset, size) for the reply of a request of run ``key`` that sends ``sent``
        bytes, or None: no room (the reply goes the usual way)."""
        want = int(self._ratio.get(key, _FIRST_RATIO) * sent) + _SLACK
        want = -(-want // _ALIGN) * _ALIGN
        with self.lock:
            self._drain()
            for i, (s, e) in enumerate(zip(self._starts, self._ends, strict=True)):
                if e - s >= want:
                    if e - s == want:
                        del self._starts[i], self._ends[i]
                    else:
                        self._starts[i] = s + want
                    return s, want
        return None

    def release(self, offset: int, size: int) -> None:
        """Span (offset, size) free again (merged with its free neighbours)."""
        with self.lock:
            self._drain()
            self._free(offset, size)

    def retire(self) -> None:
        """The processes are gone: ``unlock`` once no array views the area any more."""
        with self.lock:
            self._retired = True
            last = (self._drain() or self._live == 0) and self.unlock is not None
        if last:
            self._unlock()

    def free_bytes(self) -> int:
        with self.lock:
            self._drain()
            return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def _drop(self, offset: int, size: int) -> None:
        """A reply's block was collected (a finalizer, on any thread, maybe while this thread
        holds the lock: a collection may run anywhere): its span is queued, and freed now if
        the lock is free, else by the next call that takes it."""
        self._dropped.append((offset, size))
        if self.lock.acquire(blocking=False):
            try:
                last = self._drain()
            finally:
                self.lock.release()
            if last:
                self._unlock()

    def _drain(self) -> bool:
        """Free the spans of collected blocks (the lock held); whether that was the last block
        of a retired area (``unlock`` is then due)."""
        if not self._dropped:
            return False
        while self._dropped:
            self._free(*self._dropped.popleft())
            self._live -= 1
        return self._retired and self._live == 0 and self.unlock is not None

    def _free(self, offset: int, size: int) -> None:
        if size <= 0:
            return
        end = offset + size
        i = bisect.bisect_left(self._starts, offset)
        if i < len(self._starts) and self._starts[i] == end:  # joins the next
            self._starts[i] = offset
            if i and self._ends[i - 1] == offset:  # and the previous
                self._ends[i - 1] = self._ends[i]
                del self._starts[i], self._ends[i]
        elif i and self._ends[i - 1] == offset:  # joins the previous
            self._ends[i - 1] = end
        else:
            self._starts.insert(i, offset)
            self._ends.insert(i, end)

    def _unlock(self) -> None:
        hook, self.unlock = self.unlock, None
        if hook is not None:
            hook()

    def learn(self, key: int, sent: int, got: int) -> None:
        """A reply of ``got`` bytes to ``sent``: the run's reservations follow (with a margin:
        a reply that does not fit goes the usual way, with a copy)."""
        if sent > 0:
            seen = 1.15 * got / sent
            self._ratio[key] = max(seen, 0.9 * self._ratio.get(key, seen))

    def unpack(self, reply, span: tuple[int, int]) -> object:
        """The reply the process packed into ``span`` (``_sample_server.Packed``, offsets in
        the area): its arrays views of the area, the span's unused tail free at once, the rest
        when the last view is collected."""
        offset, size = span
        if not reply.spans:
            self.release(offset, size)
            return pickle.loads(reply.data)
        end = max(o + n for o, n in reply.spans)
        used = min(-(-(end - offset) // _ALIGN) * _ALIGN, size)
        with self.lock:  # the tail free, the block live: one hold of the lock a reply
            self._drain()
            self._free(offset + used, size - used)
            self._live += 1
        block = np.frombuffer(self.memory, np.uint8, used, offset)
        weakref.finalize(block, self._drop, offset, used)  # (_dropped, not the lock)
        buffers = [block[o - offset : o - offset + n] for o, n in reply.spans]
        return pickle.loads(reply.data, buffers=buffers)
