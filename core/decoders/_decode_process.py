"""Decoding a batch in a helper process, for the mixed decoder (Linux).

Why a process: nvImageCodec's Python binding takes and gives up the GIL once per sample of a
batch (it reads each header with the GIL released, then allocates the image with it held). In
the pipeline's process each of those takes waits for the other Python threads: the CPU stage,
the GPU stage and the other decode lanes. On an H200 with 16 cores, two of nvImageCodec's own
decode loops gave 18,399 img/s together as two threads of one process, and 25,403 as two
processes; one loop alone gave 22,370 (BENCHMARKS.md). Here the decoder runs in
``_decode_server.py``, a process of its own per decode lane, and the lane's thread makes one
request and reads one reply per batch.

The encoded samples of a batch read by ``readers.file`` stay where its read processes put
them: the server maps those slots too (``_helper_process.Region``) and decodes from them.
Other samples go through a memfd that both processes map (one ``pwritev``, with the GIL
released). The server decodes, then copies the images into a device buffer that this process
allocated and shared by its CUDA IPC handle (a *slot*), and records an interprocess CUDA event
that the lane's stream waits for; the batch's samples are views of the slot. A slot is used
again once the last of those views is gone and the GPU work queued before that on the lane's
stream has passed, as the decoded images of the in-process decoder are. A batch too big for
the shared memory is decoded in this process.
"""

from __future__ import annotations

import os
import pickle
import weakref

import numpy as np

from .._helper_process import locate, start, stop, supported
from ..errors import PipelineError

INPUT_BYTES = 1 << 31  # the most one batch's encoded samples may take (address space only)
_IOV_MAX = 1024  # buffers per pwritev
SPARE_SLOTS = 2  # free slots still read by the GPU, before a decode waits for one
_SERVER = "dlpipe.decoders._decode_server"  # the server's module


def available() -> bool:
    """Whether decode processes can run here (Linux); a pipeline uses them unless its
    ``RuntimeOptions.decode_process`` is off."""
    return supported()


class _Lease:
    """Held by a batch's samples; the slot is free once the last of them is gone."""

    __slots__ = ("memory", "__weakref__")

    def __init__(self, memory):
        self.memory = memory  # the slot's device memory outlives the batch, whatever happens


def _release(cupy, free: list, slot: int, stream, device_id: int) -> None:
    """Give ``slot`` back, with an event after the GPU work queued so far on ``stream`` (the
    lane's: it waits for the GPU operators that read the batch). Runs on whichever thread
    dropped the last view."""
    try:
        with cupy.cuda.Device(device_id):
            event = cupy.cuda.Event(block=False, disable_timing=True)
            event.record(stream)
    except Exception:  # interpreter shutdown: the next use synchronises the device instead
        event = None
    free.append((slot, event))  # atomic: safe from any thread


class DecodeProcess:
    """One server process on GPU ``device_id``, its shared memory and its slots. ``decode`` is
    called from one thread at a time (a decode lane's). ``who`` names the operator in errors.
    A process serves one operator at a time and any decoder configuration (``configure``);
    idle ones wait in a pool for the next pipeline (``take``, ``give_back``)."""

    def __init__(self, device_id: int, who: str = "decoders.image"):
        import cupy

        self.cupy, self.device_id, self.who = cupy, device_id, who
        self._proc, fd = start("dlpipe-decode", INPUT_BYTES, ["-m", _SERVER, str(device_id)])
        self._stop = weakref.finalize(self, stop, self._proc, fd)
        self._fd = fd
        self._ready: bool | None = None  # the server's first message not read yet
        self.failure = ""  # why the server could not start, or stopped answering
        self.config: dict | None = None  # the decoder configuration sent last
        self._slots: dict = {}  # slot -> cupy Memory
        self._next_slot = 0
        self._free: list = []  # (slot, event or None)
        self._dropped: list = []  # memory of dropped slots, until the server has closed them
        self._largest = 0  # the most bytes a batch took; new slots get a quarter more
        self._mapped: dict = {}  # region key -> whether the server maps it (see _maps)
        with cupy.cuda.Device(device_id):  # recorded by the server after each batch's copies
            self._event = cupy.cuda.Event(block=False, disable_timing=True, interprocess=True)
            self._send(("event", cupy.cuda.runtime.ipcGetEventHandle(self._event.ptr)))

    def configure(self, config: dict, who: str | None = None) -> None:
        """Decode with ``config`` from now on: ``load``, ``options``, ``threads`` and
        ``output_type`` (see ``_decode_server.py``); the server keeps a decoder per
        configuration."""
        self.who = who or self.who
        if config != self.config:
            self.config = dict(config)
            self._send(("config", self.config))
            self._flush()  # the server makes the decoder while this process goes on

    def _send(self, msg) -> None:
        pickle.dump(msg, self._proc.stdin, protocol=5)

    def _flush(self) -> None:
        try:
            self._proc.stdin.flush()
        except OSError:  # gone: the next reply says so
            pass

    def _recv(self):
        try:
            self._proc.stdin.flush()
            reply = pickle.load(self._proc.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            self.failure = f"exited unexpectedly (exit code {self._proc.poll()})"
            raise PipelineError(
                f"{self.who}: the decode process {self.failure}; see its message above, if any"
            ) from None
        self._dropped.clear()  # the server has handled every request sent before
        if reply[0] == "error":
            self.failure = reply[1]
            raise PipelineError(f"{self.who}: the decode process failed: {reply[1]}")
        return reply

    def trim(self) -> None:
        """Free the slots no batch holds and the server's images kept for the next batch (an
        idle process keeps only its context and decoders), and forget the batch sizes seen."""
        self._largest = 0
        self._mapped.clear()  # the server lets go of the regions it mapped
        while self._free:
            slot, event = self._free.pop()
            if event is not None:
                event.synchronize()
            self._drop(slot)
        self._send(("trim",))
        self._send(("ping",))
        self._recv()

    def ready(self) -> bool:
        """Whether the server started (waits for it the first time); else ``failure`` says
        why."""
        if self._ready is None:
            try:
                self._recv()
                self._ready = True
            except PipelineError as e:
                self._ready, self.failure = False, str(e)
                self._stop()
        return self._ready

    def _slot(self, need: int) -> int:
        """A free slot whose last batch's GPU work has passed, the oldest first (slots smaller
        than the largest batch so far are dropped). Else, while fewer than ``SPARE_SLOTS`` free
        slots wait for their GPU work, a new one of at least ``need`` bytes: waiting
        here would hold the decode back behind the GPU stage. Else the oldest, once its work
        has passed."""
        while True:
            free = self._free
            k = next((k for k, (_, ev) in enumerate(free) if ev is None or ev.done), None)
            if k is None and len(free) >= SPARE_SLOTS:
                k = 0
            if k is None:
                break
            slot, event = free.pop(k)  # only this thread takes; others only append
            if self._slots[slot].size < self._largest:
                self._drop(slot)
                continue
            if event is None:  # released at interpreter shutdown
                self.cupy.cuda.runtime.deviceSynchronize()
            else:
                event.synchronize()  # the GPU work that read its last batch has passed
            return slot
        nbytes = max(self._largest + self._largest // 4, need)
        with self.cupy.cuda.Device(self.device_id):
            memory = self.cupy.cuda.memory.Memory(nbytes)
            handle = self.cupy.cuda.runtime.ipcGetMemHandle(memory.ptr)
        slot = self._next_slot  # never reused: a slot id names one buffer for good
        self._next_slot += 1
        self._slots[slot] = memory
        self._send(("open", slot, handle, nbytes))
        return slot

    def _drop(self, slot: int) -> None:
        """Forget ``slot``; its memory is kept until the server has closed its mapping."""
        self._send(("drop", slot))
        self._dropped.append(self._slots.pop(slot))

    def decode(self, samples: list[np.ndarray], stream):
        """Decode ``samples`` (1-D uint8 arrays) in the server. Returns ``(owner, ptrs,
        shapes)``: an object the samples must keep alive, device addresses (0 where a sample
        did not decode: decode it on the CPU) and (N, 3) HWC shapes, contiguous; or None when
        the batch is too big for the shared memory. ``stream``: the lane's CUDA stream."""
        bufs = [np.ascontiguousarray(s) for s in samples]
        sizes = [b.nbytes for b in bufs]
        total = sum(sizes)
        found = locate(bufs)
        if found is not None and self._maps(found[0]):
            source = (found[0].key, found[1])  # the server reads the read process's slot
        else:
            if total > INPUT_BYTES:
                return None
            self._write(bufs, sizes)
            source = None
        # a first guess: JPEGs take about a tenth of their pixels' bytes
        slot = self._slot(self._largest or max(1 << 20, 12 * total))
        self._send(("decode", slot, sizes, source))
        reply = self._recv()
        if reply[0] == "big":  # kept in the server for a larger slot
            self._largest = reply[1]
            self._drop(slot)
            slot = self._slot(self._largest)
            self._send(("copy", slot))
            reply = self._recv()
        _, offsets, shapes, used = reply
        self._largest = max(self._largest, used)
        stream.wait_event(self._event)  # the server's copies into the slot
        memory = self._slots[slot]
        lease = _Lease(memory)
        weakref.finalize(lease, _release, self.cupy, self._free, slot, stream, self.device_id)
        ptrs = np.where(offsets >= 0, np.uint64(memory.ptr) + offsets.astype(np.uint64), 0)
        return lease, ptrs.astype(np.uint64), shapes

    def _maps(self, region) -> bool:
        """Whether the server has mapped ``region`` (a read process's slots), so that it
        decodes the samples there: no copy into this process's memfd, which took 3-4 ms of a
        lane's time per batch on the H100. Asked once per region."""
        ok = self._mapped.get(region.key)
        if ok is None:
            self._send(("map", region.key, region.path, region.size, region.inode))
            ok = self._mapped[region.key] = self._recv()[1]
        return ok

    def _write(self, bufs: list[np.ndarray], sizes: list[int]) -> None:
        """The samples, back to back from the start of the memfd (``pwritev``: the GIL is
        given up once for the batch)."""
        pos = 0
        for k in range(0, len(bufs), _IOV_MAX):
            want = sum(sizes[k : k + _IOV_MAX])
            done = os.pwritev(self._fd, bufs[k : k + _IOV_MAX], pos)
            if done != want:  # a short write (not seen on a memfd): the rest in one piece
                rest = b"".join(bytes(b) for b in bufs[k : k + _IOV_MAX])[done:]
                os.pwrite(self._fd, rest, pos + done)
            pos += want

    def close(self) -> None:
        """End the server. Batches already handed out stay valid: each holds its slot's
        memory."""
        self._stop()


IDLE_PROCESSES = 4  # idle decode processes kept per GPU for the next pipeline
_IDLE: dict[int, list] = {}  # device -> idle processes, the most recently used last


def take(device_id: int) -> DecodeProcess:
    """An idle process on GPU ``device_id``, or a new one. An idle one first frees the slots
    of batches let go of since it was given back."""
    idle = _IDLE.setdefault(device_id, [])
    while idle:
        try:
            proc = idle.pop()  # atomic: two lanes never get the same
        except IndexError:
            break
        if not proc._free:
            return proc
        try:
            proc.trim()
            return proc
        except Exception:  # it died while idle
            proc.close()
    return DecodeProcess(device_id)


def prestart(device_id: int, n: int, config: dict) -> None:
    """Have ``n`` idle processes on GPU ``device_id``, starting any missing ones now, with
    ``config`` (a process takes a second or two to start and make its decoder)."""
    idle = _IDLE.setdefault(device_id, [])
    for _ in range(n - len(idle)):
        proc = DecodeProcess(device_id)
        proc.configure(config)
        idle.insert(0, proc)


def give_back(procs: list) -> None:
    """Return an operator's processes to the pool (``procs`` is emptied); those that failed
    are stopped, and so are the oldest idle ones beyond ``IDLE_PROCESSES`` per GPU."""
    while procs:
        proc = procs.pop()
        try:
            if proc.failure or not proc.ready():
                raise PipelineError(proc.failure)
            proc.trim()
        except Exception:  # failed, or CUDA going away at interpreter exit
            proc.close()
            continue
        idle = _IDLE.setdefault(proc.device_id, [])
        idle.append(proc)
        while len(idle) > IDLE_PROCESSES:
            idle.pop(0).close()
