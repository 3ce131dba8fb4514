"""Reading the files of a batch in a helper process, for ``readers.file`` (Linux).

Why a process: read in the pipeline's own process, every file is four system calls, and the
reading thread gives the GIL up and takes it back around each of them. With decoder lanes and
the GPU stage running Python beside it, each take waits its turn: on the H100 the reads of one
batch took 8-14 ms instead of 2.3 ms (BENCHMARKS.md). Here the whole batch costs one request
and one reply, and the reads run in ``_read_server.py``, a process of its own.

The bytes land in shared memory: a memfd that both processes map, cut into ``SLOTS`` slots of
``SLOT_BYTES`` (address space only; pages are touched as files are written in). One batch is
read into one free slot, and the batch's arrays are views of it. The slot is free again once
the last of those arrays is gone, so a batch held by a consumer (or by a decoder still reading
it) is never overwritten. A batch that does not fit a slot, or finds no slot free, is read in
this process instead.
"""

from __future__ import annotations

import mmap
import os
import pickle
import weakref

import numpy as np

from .._helper_process import allowed, start, stop
from ..errors import PipelineError

SLOT_BYTES = 1 << 31  # the most one batch's files may take in the read process
SLOTS = 64
_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_read_server.py")


def available() -> bool:
    """Whether the read process may run here (Linux; ``DLPIPE_READ_PROCESS=0`` turns it off)."""
    return allowed("DLPIPE_READ_PROCESS")


class ReadProcess:
    """One helper process and its shared memory. ``read`` is called from one thread at a
    time (the CPU stage's); slots come back from whichever thread drops a batch's last array."""

    def __init__(self, who: str):
        self.who = who
        self._proc, fd = start("dlpipe-read", SLOT_BYTES * SLOTS, ["-I", "-S", _SERVER])
        self._stop = weakref.finalize(self, stop, self._proc, fd)
        self._memory = mmap.mmap(fd, SLOT_BYTES * SLOTS)
        self.owner = os.getpid()  # a forked child must not talk to its parent's process
        self._free = list(range(SLOTS - 1, -1, -1))  # pop() hands out slot 0 first

    def read(self, paths: list[str]) -> list[np.ndarray] | OSError | None:
        """The files' bytes as writable uint8 arrays in shared memory; the ``OSError`` of the
        first file that could not be opened or read (``filename`` and ``sample_index`` set,
        the latter its place in ``paths``); or None when the
        files need more than a slot, or no slot is free: then the caller reads them."""
        if not self._free:
            return None
        slot = self._free.pop()
        offset = slot * SLOT_BYTES
        try:
            pickle.dump((offset, SLOT_BYTES, paths), self._proc.stdin, protocol=5)
            self._proc.stdin.flush()
            reply = pickle.load(self._proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            self._free.append(slot)
            raise PipelineError(
                f"{self.who}: the read process exited unexpectedly "
                f"(exit code {self._proc.poll()}); see its message above, if any"
            ) from None
        if reply[0] != "ok":
            self._free.append(slot)
            if reply[0] == "big":
                return None
            _, index, errno, strerror = reply
            err = OSError(errno, strerror, paths[index])
            err.sample_index = index
            return err
        _, starts, sizes = reply
        end = max((a + b for a, b in zip(starts, sizes, strict=True)), default=offset)
        base = np.frombuffer(self._memory, np.uint8, count=end - offset, offset=offset)
        # Views of ``base`` keep it alive; the slot is free when the last one goes.
        weakref.finalize(base, self._free.append, slot)
        return [base[a - offset : a - offset + b] for a, b in zip(starts, sizes, strict=True)]

    def close(self) -> None:
        """End the process. Arrays already handed out stay valid: the mapping lives as long as
        they do."""
        self._stop()
