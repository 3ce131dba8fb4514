"""The read process behind ``readers.file``: it reads the files of a batch into shared memory.

Run by ``_ipc`` (``python -I -S dlpipe/_ipc/boot.py``), it imports only the standard library
and starts in about 20 ms. ``handler(threads, fd)`` serves one reader: ``fd`` is the reader's
memfd, cut into slots (``_read_process.py``), which the server maps as requests name them.

* :class:`Read` -> :class:`Done`: where each file landed in the slot. The paths are cut into
  ``threads`` runs of files, read by as many threads at once, each run into its own share of
  the part (page-cache reads are bound by system calls and copies; a disk wants several reads
  in flight).
* :class:`TooBig`: a run needs more than its share; ``need`` is the part this request would
  need (each run's bytes by ``fstat``), so that the reader makes a slot large enough.
* :class:`ReadFailed`: ``paths[index]`` could not be opened or read.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from dataclasses import dataclass


@dataclass(frozen=True)
class Read:
    """Read ``paths`` one after another into the slot at ``slot_offset`` (``slot_size``
    bytes) of the memfd, from ``start`` within the slot, in at most ``limit`` bytes.
    ``forget``: slots dropped since the last request, to unmap first."""

    slot_offset: int
    slot_size: int
    start: int
    limit: int
    paths: list[str]
    forget: tuple[int, ...] = ()


@dataclass(frozen=True)
class Done:
    """Where each file landed (offsets within the slot) and its size."""

    offsets: list[int]
    sizes: list[int]


@dataclass(frozen=True)
class TooBig:
    """The files need more than the part has: ``need`` bytes for this part."""

    need: int


@dataclass(frozen=True)
class ReadFailed:
    """``paths[index]`` (its index in the batch) could not be opened or read."""

    index: int
    errno: int
    strerror: str


def read_run(view: memoryview, start: int, end: int, paths: list[str], first: int):
    """Read ``paths`` one after another into ``view[start:end]``; ``first`` is the index of
    ``paths[0]`` in the batch (for errors). Returns Done, ReadFailed, or None when they do
    not fit."""
    offsets, sizes = [], []
    pos = start
    for i, path in enumerate(paths, first):
        try:  # O_NONBLOCK: a FIFO does not wait for a writer (refused below)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            return ReadFailed(i, e.errno, e.strerror)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # FIFO, device, directory: refused by name
                return ReadFailed(
                    i, errno.EINVAL, "not a regular file (a FIFO, device or directory)"
                )
            size = st.st_size
            if pos + size > end:
                return None
            got = 0
            while got < size:  # short reads (signals, special files): read the rest
                more = os.readv(fd, [view[pos + got : pos + size]])
                if more == 0:  # the file shrank since fstat
                    break
                got += more
        except OSError as e:
            return ReadFailed(i, e.errno, e.strerror)
        finally:
            os.close(fd)
        offsets.append(pos)
        sizes.append(got)
        pos += got
    return Done(offsets, sizes)


def run_bytes(paths: list[str]) -> int:
    """The bytes of ``paths`` now (a file that cannot be stat'ed counts 0: its read reports
    it)."""
    total = 0
    for path in paths:
        try:
            total += os.stat(path).st_size
        except OSError:
            pass
    return total


class Server:
    """One reader's read server: its memfd's slots, mapped as requests name them."""

    def __init__(self, threads: int, fd: int):
        self.threads = max(1, threads)
        self.fd = fd
        self.slots: dict[int, tuple[mmap.mmap, memoryview]] = {}  # slot offset -> mapping
        # one reading thread (the default): this one, with no hand-off to a pool per batch (and
        # no concurrent.futures to import: a quarter of the start time)
        self.pool = None
        if self.threads > 1:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(self.threads)

    def view(self, offset: int, size: int) -> memoryview:
        got = self.slots.get(offset)
        if got is None or len(got[0]) != size:
            memory = mmap.mmap(self.fd, size, offset=offset)
            got = self.slots[offset] = (memory, memoryview(memory))
        return got[1]

    def forget(self, offsets) -> None:
        for offset in offsets:
            got = self.slots.pop(offset, None)
            if got is not None:
                got[1].release()
                got[0].close()

    def handle(self, msg: Read):
        self.forget(msg.forget)
        view = self.view(msg.slot_offset, msg.slot_size)
        threads, paths = self.threads, msg.paths
        share = msg.limit // threads
        step = -(-len(paths) // threads) or 1
        runs = [
            (view, msg.start + k * share, msg.start + (k + 1) * share, paths[j : j + step], j)
            for k, j in enumerate(range(0, len(paths), step))
        ]
        if self.pool is None:
            results = [read_run(*run) for run in runs]
        else:
            results = list(self.pool.map(lambda run: read_run(*run), runs))
        for r in results:  # the first failure in batch order
            if isinstance(r, ReadFailed):
                return r
        if any(r is None for r in results):
            return TooBig(max(run_bytes(run[3]) for run in runs) * threads)
        return Done([o for r in results for o in r.offsets], [s for r in results for s in r.sizes])


def handler(threads: int, fd: int):
    """The ``handle`` function of a read server for the memfd ``fd`` (see ``_ipc.server``)."""
    return Server(threads, fd).handle
