"""Reading the files of a batch in helper processes, for ``readers.file`` (Linux).

Why processes: read in the pipeline's own process, every file is four system calls, and the
reading thread gives the GIL up and takes it back around each of them. With decoder lanes and
the GPU stage running Python beside it, each take waits its turn: on the H100 the reads of one
batch took 8-14 ms instead of 2.3 ms (BENCHMARKS.md, "Read processes × threads"). Here the
whole batch costs one request and one reply per process, and the reads run in
``_read_server.py``. ``PROCESSES`` servers each read a contiguous part of the batch, at the
same time: one server's own Python, about 25 us per file, held a batch of 128 files to 5 ms.

The bytes land in shared memory: one memfd per reader, which every server maps, cut into
*slots*. One batch is read into one slot, each server into its own part of it, and the
batch's arrays are views of the slot (``_ipc.slots``: the slot is free again once the last of
those arrays is gone, so a batch held by a consumer, or by a decoder still reading it, is never
overwritten). Only what is used is mapped: slots start at ``FIRST_SLOT_BYTES`` and the memfd
grows by a slot at a time. A batch that does not fit is read again into a slot of the size it
needs (and every later slot gets that size; smaller free ones are dropped, their pages given
back). Under ``ulimit -v`` this is what lets a reader start at all: the first design reserved
128 GiB of address space per reader. A batch larger than ``MAX_SLOT_BYTES``, or one that
finds ``SLOTS`` slots held, is read in this process instead.
"""

from __future__ import annotations

import collections
import mmap
import os
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._ipc.process import HelperError, HelperProcess, HelperStartError, stop_all, supported
from .._ipc.regions import share, unshare
from .._ipc.slots import SlotPool
from ..errors import DlpipeError, PipelineError
from ._read_server import Done, Read, ReadFailed, TooBig

FIRST_SLOT_BYTES = 16 << 20  # a batch of 128 ImageNet JPEGs takes about 14 MB
MAX_SLOT_BYTES = 1 << 31  # the most one batch's files may take in the read processes
SLOTS = 64  # slots alive at once (free or held), at most
_ALIGN = 1 << 20  # slot sizes are whole MiB (offsets stay page-aligned)
# Server processes per reader, and reading threads in each. A server spends tens of us of
# GIL-bound Python per file, so threads in one process wait for each other. On the H100, with
# the pipeline running, one server with 4 threads took 5-7 ms per batch of 128 files; 4
# servers of one thread took 2.4-3.3 ms (alone: 3.9 against 0.85 ms; BENCHMARKS.md, "Read
# processes × threads").
PROCESSES = 4
THREADS = 1
_SERVER = "dlpipe.readers._read_server"


def available() -> bool:
    """Whether read processes can run here (Linux); a pipeline uses them unless its
    ``RuntimeOptions.read_process`` is off."""
    return supported()


@dataclass(eq=False)
class _Slot:
    offset: int  # in the memfd
    size: int
    memory: mmap.mmap  # this process's mapping of it


class _Memfd:
    """A reader's memfd and its slots, cut from its end as they are made. Holds no reference
    to the ReadProcess (slots come back to the pool from any thread)."""

    def __init__(self, processes: int):
        self.fd = os.memfd_create("dlpipe-read", os.MFD_CLOEXEC)
        self.end = 0  # the memfd's size
        self.slots: dict[int, _Slot] = {}  # offset -> slot, made and not dropped
        # per server: offsets of slots dropped since its last request (it unmaps them)
        self.forgotten = [collections.deque() for _ in range(processes)]

    def make(self, size: int) -> _Slot:
        offset = self.end
        os.ftruncate(self.fd, offset + size)
        self.end += size
        try:
            memory = mmap.mmap(self.fd, size, offset=offset)
        except BaseException:
            os.ftruncate(self.fd, offset)
            self.end = offset
            raise
        share(memory, self.fd, offset)  # decode processes decode from the slot without a copy
        slot = self.slots[offset] = _Slot(offset, size, memory)
        return slot

    def drop(self, slot: _Slot) -> None:
        """Forget a free slot: its pages go back to the system, and the servers unmap it."""
        unshare(slot.memory)
        try:
            slot.memory.madvise(mmap.MADV_REMOVE)  # frees the memfd's pages (a hole)
            slot.memory.close()
        except (OSError, ValueError, BufferError):  # a view still alive: the GC closes it
            pass
        self.slots.pop(slot.offset, None)
        for queue in self.forgotten:
            queue.append(slot.offset)

    def take_forgotten(self, k: int) -> tuple[int, ...]:
        queue, out = self.forgotten[k], []
        while queue:
            out.append(queue.popleft())
        return tuple(out)


class ReadProcess:
    """The helper processes of one reader and their shared memory. ``read`` is called from one
    thread at a time (the CPU stage's); slots come back from whichever thread drops a batch's
    last array.

    Raises:
        HelperStartError: no Python interpreter to run the servers (``_ipc.process.python``).
    """

    def __init__(self, who: str, processes: int | None = None, threads: int | None = None):
        self.who = who
        processes = processes or PROCESSES
        self._threads = threads or THREADS
        self._memfd = _Memfd(processes)
        self.helpers: list[HelperProcess] = []
        try:
            self.helpers = [self._start() for _ in range(processes)]
        except BaseException:
            stop_all(self.helpers)
            os.close(self._memfd.fd)
            raise
        self._pool: SlotPool[_Slot] = SlotPool(drop=self._memfd.drop)
        self._size = FIRST_SLOT_BYTES  # the size of new slots; only grows
        self._stop = weakref.finalize(self, _close, self.helpers, self._memfd)
        self.owner = os.getpid()  # a forked child must not talk to its parent's processes
        self._broken = ""  # why the processes can no longer be used

    def _start(self) -> HelperProcess:
        args = {"threads": self._threads, "fd": self._memfd.fd}
        return HelperProcess("read process", _SERVER, args, pass_fds=(self._memfd.fd,))

    def read(self, paths: list[str]) -> list[np.ndarray] | OSError | None:
        """The files' bytes as writable uint8 arrays in shared memory; the ``OSError`` of the
        first file that could not be opened or read (``filename`` and ``sample_index`` set,
        the latter its place in ``paths``); or None when the files need more than
        ``MAX_SLOT_BYTES``, or ``SLOTS`` slots are held: then the caller reads them.

        Raises:
            HelperStartError: the servers did not start (the caller reads in its process).
            PipelineError: a server failed or exited.
        """
        if self._broken:
            raise PipelineError(f"{self.who}: {self._broken}")
        if any(h.interrupted for h in self.helpers):  # a KeyboardInterrupt cut a request
            self._restart()
        slot = self._slot(self._size)
        if slot is None:
            return None
        for _ in range(3):  # a file may grow between the server's fstat and its read
            replies = self._request(slot, paths)
            big = [r.need for r in replies if isinstance(r, TooBig)]
            if not big:
                break
            need = max(big) * len(self.helpers)  # each server gets an equal part
            size = -(-(need + need // 4) // _ALIGN) * _ALIGN
            if size > MAX_SLOT_BYTES:  # this batch only: later ones get slots as before
                self._pool.put(slot)
                return None
            self._size = max(self._size, size)
            self._memfd.drop(slot)
            slot = self._slot(self._size)
            if slot is None:
                return None
        else:
            self._pool.put(slot)
            return None
        step = self._step(len(paths))
        for j, reply in zip(range(0, len(paths), step), replies, strict=True):
            if isinstance(reply, ReadFailed):  # the batch's first failure
                self._pool.put(slot)
                err = OSError(reply.errno, reply.strerror, paths[j + reply.index])
                err.sample_index = j + reply.index
                return err
        starts = [a for r in replies for a in r.offsets]
        sizes = [b for r in replies for b in r.sizes]
        end = max((a + b for a, b in zip(starts, sizes, strict=True)), default=0)
        base = np.frombuffer(slot.memory, np.uint8, count=end)
        self._pool.lease(slot, holder=base)  # views of ``base`` keep the slot
        return [base[a : a + b] for a, b in zip(starts, sizes, strict=True)]

    def _slot(self, size: int) -> _Slot | None:
        """A free slot of ``size`` bytes or more (smaller ones are dropped), or a new one."""
        slot = self._pool.take(accept=lambda s: s.size >= size)
        if slot is None and len(self._memfd.slots) < SLOTS:
            slot = self._memfd.make(size)
        return slot

    def _step(self, n: int) -> int:
        return -(-n // len(self.helpers)) or 1

    def _request(self, slot: _Slot, paths: list[str]) -> list:
        """Each server reads its part of ``paths`` into its part of ``slot``, at once."""
        part = slot.size // len(self.helpers)
        step = self._step(len(paths))
        asked = []
        try:
            for k, j in enumerate(range(0, len(paths), step)):
                forget = self._memfd.take_forgotten(k)
                msg = Read(slot.offset, slot.size, k * part, part, paths[j : j + step], forget)
                self.helpers[k].submit(msg)
                asked.append(self.helpers[k])
            replies = [h.result() for h in asked]
        except HelperStartError:  # the caller reads in its own process from now on
            self._pool.put(slot)
            raise
        except HelperError as e:
            self._pool.put(slot)
            # the others may still owe a reply: none of them can be trusted to answer in turn
            self._broken = str(e)
            self.close()
            raise PipelineError(f"{self.who}: {e}; see its message above, if any") from None
        except BaseException:
            self._pool.put(slot)
            raise
        for reply in replies:
            if not isinstance(reply, (Done, TooBig, ReadFailed)):
                self._broken = f"a read process answered {reply!r}"
                self.close()
                raise PipelineError(f"{self.who}: {self._broken}")
        return replies

    def _restart(self) -> None:
        stop_all(self.helpers)
        self.helpers[:] = [self._start() for _ in self.helpers]

    def close(self) -> None:
        """End the processes. Arrays already handed out stay valid: the mapping lives as long
        as they do."""
        self._stop()


def _close(helpers: list[HelperProcess], memfd: _Memfd) -> None:
    stop_all(helpers)
    for slot in list(memfd.slots.values()):
        unshare(slot.memory)  # before the fd's number can name another file
    os.close(memfd.fd)  # the mappings stay, each as long as arrays view it


_WARNED: list[str] = []  # why read processes could not start here, once said per process


class BatchReads:
    """The files of a batch, for an operator that reads them (``readers.file``, ``readers.coco``,
    ``io.file.read``): in read processes where they run (a :class:`ReadProcess`, started by
    the first batch), else in this process, one file after another.

    Args:
        who: the operator's name, for messages.
        read_here: reads one file in this process (raises the operator's error).
        error: the operator's error for a file the read processes could not read (its path
            and the ``OSError``).

    Invariant: a process uses only read processes it started; a forked child starts its own.
    """

    def __init__(
        self,
        who: str,
        read_here: Callable[[str], np.ndarray],
        error: Callable[[str, OSError], DlpipeError],
    ):
        self.who, self.read_here, self.error = who, read_here, error
        self.use_process = available()  # the pipeline's options decide: configure()
        self.processes = PROCESSES
        self.process: ReadProcess | None = None

    def configure(self, runtime) -> None:
        """Take the pipeline's ``RuntimeOptions`` (``read_process``, ``read_processes``)."""
        self.use_process = runtime.read_process and available()
        self.processes = runtime.read_processes

    def read(self, paths: list[str]) -> list[np.ndarray]:
        """The files' bytes, in order, as 1-D uint8 arrays.

        Raises:
            the operator's error (``error`` / ``read_here``) for the first file that cannot be
            read, with ``sample_index`` set to its place in ``paths``.
        """
        data = None
        if self.process is not None and self.process.owner != os.getpid():
            self.process = None  # forked: the parent's read process stays the parent's
        if self.process is None and self.use_process:
            try:
                self.process = ReadProcess(self.who, self.processes)
            except (OSError, HelperStartError) as e:  # no memfd, no Python: read here
                self._no_process(e)
        if self.process is not None:
            try:
                data = self.process.read(paths)
            except HelperStartError as e:  # the servers did not start
                self.process.close()
                self.process = None
                self._no_process(e)
            if isinstance(data, OSError):
                err = self.error(data.filename, data)
                err.sample_index = data.sample_index  # the executor names the sample's file
                raise err
        if data is None:
            data = []
            for i, path in enumerate(paths):
                try:
                    data.append(self.read_here(path))
                except DlpipeError as e:
                    e.sample_index = i
                    raise
        return data

    def _no_process(self, why: Exception) -> None:
        """Read in this process from now on; say why once per process."""
        self.use_process = False
        if not _WARNED:
            _WARNED.append(str(why))
            warnings.warn(
                f"{self.who}: reading files in the pipeline's process, without read "
                f"processes: {why}",
                RuntimeWarning,
                stacklevel=3,
            )

    def close(self) -> None:
        if self.process is not None:
            self.process.close()
            self.process = None
