"""Reading the files of a batch in helper processes, for ``readers.file`` (Linux).

Why processes: read in the pipeline's own process, every file is four system calls, and the
reading thread gives the GIL up and takes it back around each of them. With decoder lanes and
the GPU stage running Python beside it, each take waits its turn: on the H100 the reads of one
batch took 8-14 ms instead of 2.3 ms (BENCHMARKS.md). Here the whole batch costs one request
and one reply per process, and the reads run in ``_read_server.py``. ``PROCESSES`` servers
each read a contiguous part of the batch, at the same time: one server's own Python, about
25 us per file, held a batch of 128 files to 5 ms.

The bytes land in shared memory: a memfd that every process maps, cut into ``SLOTS`` slots of
``SLOT_BYTES`` (address space only; pages are touched as files are written in). One batch is
read into one free slot, each server into its own share of it, and the batch's arrays are
views of the slot. The slot is free again once the last of those arrays is gone, so a batch
held by a consumer (or by a decoder still reading it) is never overwritten. A batch that does
not fit a slot, or finds no slot free, is read in this process instead.
"""

from __future__ import annotations

import mmap
import os
import pickle
import weakref

import numpy as np

from .._helper_process import share, spawn, start, stop, supported, unshare
from ..errors import PipelineError

SLOT_BYTES = 1 << 31  # the most one batch's files may take in the read processes
SLOTS = 64
# Server processes per reader, and reading threads in each. A server spends tens of us of
# GIL-bound Python per file, so threads in one process wait for each other. On the H100, with
# the pipeline running, one server with 4 threads took 5-7 ms per batch of 128 files; 4
# servers of one thread took 2.4-3.3 ms (alone: 3.9 against 0.85 ms; BENCHMARKS.md, sixth
# session).
PROCESSES = 4
THREADS = 1
_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_read_server.py")


def available() -> bool:
    """Whether read processes can run here (Linux); a pipeline uses them unless its
    ``RuntimeOptions.read_process`` is off."""
    return supported()


class ReadProcess:
    """The helper processes of one reader and their shared memory. ``read`` is called from one
    thread at a time (the CPU stage's); slots come back from whichever thread drops a batch's
    last array."""

    def __init__(self, who: str, processes: int | None = None, threads: int | None = None):
        self.who = who
        processes = processes or PROCESSES
        args = ["-I", "-S", _SERVER, str(threads or THREADS)]
        first, fd = start("dlpipe-read", SLOT_BYTES * SLOTS, args)
        self._procs = [first]
        self._memory = mmap.mmap(fd, SLOT_BYTES * SLOTS)
        share(self._memory, fd)  # decode processes decode from the slots without a copy
        self._stop = weakref.finalize(self, _end, self._memory, self._procs, fd)
        self._procs += [spawn(args, fd) for _ in range(processes - 1)]
        self.owner = os.getpid()  # a forked child must not talk to its parent's processes
        self._free = list(range(SLOTS - 1, -1, -1))  # pop() hands out slot 0 first
        self._broken = ""  # why the processes can no longer be used

    def read(self, paths: list[str]) -> list[np.ndarray] | OSError | None:
        """The files' bytes as writable uint8 arrays in shared memory; the ``OSError`` of the
        first file that could not be opened or read (``filename`` and ``sample_index`` set,
        the latter its place in ``paths``); or None when the files need more than a slot,
        or no slot is free: then the caller reads them."""
        if self._broken:
            raise PipelineError(f"{self.who}: {self._broken}")
        if not self._free:
            return None
        slot = self._free.pop()
        offset = slot * SLOT_BYTES
        part_bytes = SLOT_BYTES // len(self._procs)  # each process reads into its own part
        step = -(-len(paths) // len(self._procs)) or 1
        parts = list(enumerate(range(0, len(paths), step)))
        try:
            for k, j in parts:
                request = (offset + k * part_bytes, part_bytes, paths[j : j + step])
                pickle.dump(request, self._procs[k].stdin, protocol=5)
                self._procs[k].stdin.flush()
            replies = [pickle.load(self._procs[k].stdout) for k, _ in parts]
        except (EOFError, OSError, pickle.UnpicklingError):
            self._free.append(slot)
            codes = ", ".join(str(p.poll()) for p in self._procs)
            # the others may still owe a reply: none of them can be trusted to answer in turn
            self._broken = f"a read process exited unexpectedly (exit codes {codes})"
            self.close()
            raise PipelineError(
                f"{self.who}: {self._broken}; see its message above, if any"
            ) from None
        for (_, j), reply in zip(parts, replies, strict=True):  # the batch's first failure
            if reply[0] == "big":
                self._free.append(slot)
                return None
            if reply[0] != "ok":
                self._free.append(slot)
                _, index, errno, strerror = reply
                err = OSError(errno, strerror, paths[j + index])
                err.sample_index = j + index
                return err
        starts = [a for r in replies for a in r[1]]
        sizes = [b for r in replies for b in r[2]]
        end = max((a + b for a, b in zip(starts, sizes, strict=True)), default=offset)
        base = np.frombuffer(self._memory, np.uint8, count=end - offset, offset=offset)
        # Views of ``base`` keep it alive; the slot is free when the last one goes.
        weakref.finalize(base, self._free.append, slot)
        return [base[a - offset : a - offset + b] for a, b in zip(starts, sizes, strict=True)]

    def close(self) -> None:
        """End the processes. Arrays already handed out stay valid: the mapping lives as long
        as they do."""
        self._stop()


def _end(memory: mmap.mmap, procs: list, fd: int) -> None:
    unshare(memory)  # before the fd's number can name another file
    stop(procs, fd)
