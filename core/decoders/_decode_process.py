"""Decoding a batch in a helper process, for the mixed decoder (Linux).

Why a process: nvImageCodec's Python binding takes and gives up the GIL once per sample of a
batch (it reads each header with the GIL released, then allocates the image with it held). In
the pipeline's process each of those takes waits for the other Python threads: the CPU stage,
the GPU stage and the other decode lanes. On an H200 with 16 cores, two of nvImageCodec's own
decode loops gave 18,399 img/s together as two threads of one process, and 25,403 as two
processes; one loop alone gave 22,370 (BENCHMARKS.md, "Where the decode ceiling is"). Here the
decoder runs in ``_decode_server.py``, a helper process of its own per decode lane
(``_ipc.process``), and the lane's thread makes one request and reads one reply per batch.

The encoded samples of a batch read by ``readers.file`` stay where its read processes put
them: the server maps those slots too (``_ipc.regions``) and decodes from them. Other samples
go through a memfd that both processes map (one ``pwritev``, with the GIL released). The server
decodes straight into a device buffer that this process allocated and shared by its CUDA IPC
handle (a *device slot*; ``_decode_server.Server.decode_into``), and records an interprocess
CUDA event that the lane's stream waits for; the batch's samples are views of the slot.

Device slots (``_ipc.slots.SlotPool``): a slot is free once the last view of its batch is gone,
with an event recorded then on the lane's stream (after the GPU operators that read the batch),
and it is decoded into again only once that event is done. A batch too big for the shared
memory is decoded in this process.
"""

from __future__ import annotations

import functools
import os
import weakref
from dataclasses import dataclass

import numpy as np

from .._ipc.process import HelperError, HelperProcess, HelperStartError, supported
from .._ipc.regions import MappedRegions, locate
from .._ipc.slots import SlotPool
from ..errors import PipelineError
from ._decode_server import (
    Configure,
    CopyInto,
    Decode,
    Decoded,
    Drop,
    Open,
    Ping,
    TooSmall,
    Trim,
    UseEvent,
)

INPUT_BYTES = 1 << 31  # the most one batch's encoded samples may take in the memfd
_IOV_MAX = 1024  # buffers per pwritev
SPARE_SLOTS = 2  # free slots still read by the GPU, before a decode waits for one
_SERVER = "dlpipe.decoders._decode_server"


def available() -> bool:
    """Whether decode processes can run here (Linux); a pipeline uses them unless its
    ``RuntimeOptions.decode_process`` is off."""
    return supported()


@dataclass(eq=False)
class _DeviceSlot:
    id: int  # never reused: an id names one buffer for good (the server's name for it)
    memory: object  # cupy Memory; a batch's lease holds it, so it outlives the process


class _SyncDevice:
    """The event of a slot released when no event could be recorded (interpreter shutdown):
    the next use synchronises the device instead."""

    done = False

    def __init__(self, cupy, device_id: int):
        self.cupy, self.device_id = cupy, device_id

    def synchronize(self) -> None:
        with self.cupy.cuda.Device(self.device_id):
            self.cupy.cuda.runtime.deviceSynchronize()


def _record(cupy, stream, device_id: int):
    """An event after the GPU work queued so far on ``stream`` (the lane's: it waits for the
    GPU operators that read the batch). Runs on whichever thread dropped the last view."""
    try:
        with cupy.cuda.Device(device_id):
            event = cupy.cuda.Event(block=False, disable_timing=True)
            event.record(stream)
            return event
    except Exception:
        return _SyncDevice(cupy, device_id)


class DecodeProcess:
    """One server process on GPU ``device_id``, its shared memory and its slots. ``decode`` is
    called from one thread at a time (a decode lane's). ``who`` names the operator in errors.
    A process serves one operator at a time and any decoder configuration (``configure``);
    idle ones wait in a pool for the next pipeline (``take``, ``give_back``).

    Raises:
        HelperStartError: no Python interpreter to run the server.
    """

    def __init__(self, device_id: int, who: str = "decoders.image"):
        import cupy

        self.cupy, self.device_id, self.who = cupy, device_id, who
        self._fd = os.memfd_create("dlpipe-decode", os.MFD_CLOEXEC)
        try:
            self._helper = HelperProcess(
                "decode process",
                _SERVER,
                {"device_id": device_id, "fd": self._fd},
                path=True,  # numpy, CuPy, nvImageCodec
                pass_fds=(self._fd,),
            )
        except BaseException:
            os.close(self._fd)
            raise
        self._stop = weakref.finalize(self, _close, self._helper, self._fd)
        self._ready: bool | None = None  # the handshake not read yet
        self.failure = ""  # why the server could not start, or stopped answering
        self.config: dict | None = None  # the decoder configuration sent last
        self._dropped: list = []  # memory of dropped slots, until the server has closed them
        # (a batch's lease holds the pool: its drop must not hold this object, so that a
        # process nobody uses is stopped even while batches it decoded are held)
        self._pool: SlotPool[_DeviceSlot] = SlotPool(
            drop=functools.partial(_drop, self._helper, self._dropped)
        )
        self._next_slot = 0
        self._largest = 0  # the most bytes a batch took; new slots get a quarter more
        self._mapped = MappedRegions()  # the regions the server maps (see _maps)
        with cupy.cuda.Device(device_id):  # recorded by the server after each batch's copies
            self._event = cupy.cuda.Event(block=False, disable_timing=True, interprocess=True)
            self._helper.notify(UseEvent(cupy.cuda.runtime.ipcGetEventHandle(self._event.ptr)))

    @property
    def interrupted(self) -> bool:
        """Whether a KeyboardInterrupt cut a request in half (take another process)."""
        return self._helper.interrupted

    def configure(self, config: dict, who: str | None = None) -> None:
        """Decode with ``config`` from now on: ``load``, ``options``, ``threads`` and
        ``output_type`` (see ``_decode_server.Configure``); the server keeps a decoder per
        configuration."""
        self.who = who or self.who
        if config != self.config:
            self.config = dict(config)
            self._notify(Configure(self.config))

    def _notify(self, message) -> None:
        try:
            self._helper.notify(message)
        except HelperError:  # gone: the next request says so
            pass

    def _request(self, message):
        try:
            reply = self._helper.request(message)
        except HelperError as e:
            self.failure = str(e)
            raise PipelineError(f"{self.who}: {e}") from None
        self._dropped.clear()  # the server has handled every message sent before
        return reply

    def ready(self) -> bool:
        """Whether the server started (waits for it the first time); else ``failure`` says
        why."""
        if self._ready is None:
            try:
                self._helper.wait_ready()
                self._ready = True
            except HelperStartError as e:
                self._ready, self.failure = False, str(e)
                self._stop()
        return self._ready

    def trim(self) -> None:
        """Free the slots no batch holds and the server's images kept for the next batch (an
        idle process keeps only its context and decoders), and forget the batch sizes seen."""
        self._largest = 0
        self._mapped.clear()  # the server lets go of the regions it mapped
        self._pool.clear()  # each once its GPU work has passed
        self._notify(Trim())
        self._request(Ping())

    def idle_slots(self) -> int:
        """Free slots, which a ``trim`` would free."""
        return len(self._pool)

    def _slot(self, need: int) -> _DeviceSlot:
        """A free slot whose last batch's GPU work has passed, the oldest first (slots smaller
        than the largest batch so far are dropped). Else, while fewer than ``SPARE_SLOTS`` free
        slots wait for their GPU work, a new one of at least ``need`` bytes: waiting here
        would hold the decode back behind the GPU stage. Else the oldest, once its work has
        passed."""
        fits = lambda s: s.memory.size >= self._largest  # noqa: E731
        slot = self._pool.take(accept=fits, ready_only=True)
        if slot is None and len(self._pool) >= SPARE_SLOTS:
            slot = self._pool.take(accept=fits)
        if slot is not None:
            return slot
        nbytes = max(self._largest + self._largest // 4, need)
        with self.cupy.cuda.Device(self.device_id):
            memory = self.cupy.cuda.memory.Memory(nbytes)
            handle = self.cupy.cuda.runtime.ipcGetMemHandle(memory.ptr)
        slot = _DeviceSlot(self._next_slot, memory)
        self._next_slot += 1
        self._notify(Open(slot.id, handle, nbytes))
        return slot

    def decode(self, samples: list[np.ndarray], stream):
        """Decode ``samples`` (1-D uint8 arrays) in the server. Returns ``(owner, ptrs,
        shapes, refused)``: an object the samples must keep alive (the slot's lease), device
        addresses (0 where a sample did not decode: decode it on the CPU, unless refused),
        (N, 3) HWC shapes, contiguous, and the samples the server refused before decoding
        (``_decode_server.refusals``); or None when the batch is too big for the shared
        memory. ``stream``: the lane's CUDA stream."""
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
        reply = self._request(Decode(slot.id, sizes, source))
        if isinstance(reply, TooSmall):  # kept in the server for a larger slot
            self._largest = reply.nbytes
            self._pool.drop(slot)
            slot = self._slot(self._largest)
            reply = self._request(CopyInto(slot.id))
        if not isinstance(reply, Decoded):
            self.failure = f"the decode process answered {reply!r}"
            raise PipelineError(f"{self.who}: {self.failure}")
        self._largest = max(self._largest, reply.nbytes)
        stream.wait_event(self._event)  # the server's copies into the slot
        on_release = functools.partial(_record, self.cupy, stream, self.device_id)
        lease = self._pool.lease(slot, on_release=on_release)
        offsets = reply.offsets
        base = np.uint64(slot.memory.ptr)
        ptrs = np.where(offsets >= 0, base + offsets.astype(np.uint64), 0)
        return lease, ptrs.astype(np.uint64), reply.shapes, reply.refused

    def _maps(self, region) -> bool:
        """Whether the server has mapped ``region`` (a read process's slot), so that it decodes
        the samples there: no copy into this process's memfd, which took 3-4 ms of a lane's
        time per batch on the H100. Asked once per region; regions gone in the reader (a slot
        it dropped, a reader closed) are let go of when a new one is asked for."""
        return self._mapped.maps(region, self._notify, self._request)

    def _write(self, bufs: list[np.ndarray], sizes: list[int]) -> None:
        """The samples, back to back from the start of the memfd (``pwritev``: the GIL is
        given up once for the batch; the memfd grows as it is written past its end)."""
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


def _drop(helper: HelperProcess, dropped: list, slot: _DeviceSlot) -> None:
    """Forget ``slot``; its memory is kept in ``dropped`` until the server has closed its
    mapping (the reply to any later request says so)."""
    try:
        helper.notify(Drop(slot.id))
    except HelperError:  # gone: nothing maps it any more
        return
    dropped.append(slot.memory)


def _close(helper: HelperProcess, fd: int) -> None:
    helper.stop()
    os.close(fd)


IDLE_PROCESSES = 4  # idle decode processes kept per GPU for the next pipeline, by default
_IDLE: dict[int, list] = {}  # device -> idle processes, the most recently used last
if hasattr(os, "register_at_fork"):  # a forked child has no CUDA and none of these processes
    os.register_at_fork(after_in_child=_IDLE.clear)


def take(device_id: int) -> DecodeProcess:
    """An idle process on GPU ``device_id``, or a new one. An idle one first frees the slots
    of batches let go of since it was given back."""
    idle = _IDLE.setdefault(device_id, [])
    while idle:
        try:
            proc = idle.pop()  # atomic: two lanes never get the same
        except IndexError:
            break
        if not proc.idle_slots():
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


def give_back(procs: list, keep: int = IDLE_PROCESSES) -> None:
    """Return an operator's processes to the pool (``procs`` is emptied); those that failed
    are stopped, and so are the oldest idle ones beyond ``keep`` per GPU (the pipeline's
    ``RuntimeOptions.idle_decode_processes``)."""
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
        while len(idle) > keep:
            idle.pop(0).close()
