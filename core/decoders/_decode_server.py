"""The decode process behind the mixed decoder: nvImageCodec decoding in a process of its own.

Run by ``_ipc`` (``python -I -S dlpipe/_ipc/boot.py``, with the pipeline process's module path)
as ``handler(device_id, fd)``: GPU ``device_id``; ``fd`` a memfd into which the pipeline's
process writes a batch's encoded samples one after another when they are not in a read
process's slot. It imports numpy, CuPy, nvImageCodec and these few dlpipe modules: ``_ipc``,
``types``, ``kernels`` (the copy kernel) and ``decoders._codec`` (not the operator registry,
OpenCV or Pillow: ``tests/core/test_decode_process_host.py`` checks).

Notifications (no reply): :class:`Configure`, :class:`UseEvent`, :class:`Open`, :class:`Drop`,
:class:`Unmap`, :class:`Trim`. Requests: :class:`Ping` -> ``"pong"``, :class:`Map` -> bool,
:class:`Decode` and :class:`CopyInto` -> :class:`Decoded` or :class:`TooSmall`. A failure
replies ``_ipc.messages.Failed`` with this process's traceback.

The reply to a decode comes once the copies are queued on this process's stream, followed by
the event: the pipeline's process makes its stream wait for that event before it reads the
buffer. The next batch is decoded on the same stream, so the images are decoded into again
only after their copies.
"""

from __future__ import annotations

import json
import mmap
from dataclasses import dataclass

import numpy as np

from .._ipc.regions import open_region
from ..kernels.copy import copy_batch, copy_descriptors

ALIGN = 256


@dataclass(frozen=True)
class Configure:
    """Decode with ``config`` from now on: ``load`` (the hardware engines' share), ``options``,
    ``threads`` and ``output_type`` (a ``DALIImageType`` name). A decoder is made per
    configuration and kept."""

    config: dict


@dataclass(frozen=True)
class UseEvent:
    """The pipeline process's interprocess CUDA event (its IPC handle), recorded after each
    batch's copies."""

    handle: bytes


@dataclass(frozen=True)
class Open:
    """A device buffer of the pipeline's process (a *slot*), by its CUDA IPC handle."""

    slot: int
    handle: bytes
    nbytes: int


@dataclass(frozen=True)
class Drop:
    """Close the mapping of buffer ``slot``."""

    slot: int


@dataclass(frozen=True)
class Map:
    """Map another process's shared memory (a read process's slot, ``_ipc.regions.Region``),
    kept under ``key`` until :class:`Unmap` or :class:`Trim`. Reply: whether it could."""

    key: tuple
    path: str
    offset: int
    size: int
    inode: int


@dataclass(frozen=True)
class Unmap:
    """Let go of the region ``key`` (gone in the process that shared it)."""

    key: tuple


@dataclass(frozen=True)
class Trim:
    """Let go of the images kept for the next batch, of every configuration, and of the
    regions mapped: the process goes idle."""


@dataclass(frozen=True)
class Ping:
    """Reply ``"pong"`` once every message before it is handled."""


@dataclass(frozen=True)
class Decode:
    """Decode a batch and copy the images into buffer ``slot``, one after another and
    ``ALIGN``-byte aligned, in one kernel launch. The samples are back to back from the start
    of the memfd when ``source`` is None, else at ``offsets`` in the region ``key`` for
    ``source = (key, offsets)``."""

    slot: int
    sizes: list[int]
    source: tuple | None = None


@dataclass(frozen=True)
class CopyInto:
    """Copy the images kept after :class:`TooSmall` into the larger buffer ``slot``."""

    slot: int


@dataclass(frozen=True)
class Decoded:
    """Where each image lies in the slot (int64, -1 where a sample did not decode: the
    pipeline's process decodes it on the CPU), its HWC shape, and the bytes used."""

    offsets: np.ndarray
    shapes: np.ndarray
    nbytes: int


@dataclass(frozen=True)
class TooSmall:
    """The images need ``nbytes``, more than the buffer has; they are kept for a
    :class:`CopyInto` a larger one."""

    nbytes: int


def layout(images: list) -> tuple[np.ndarray, np.ndarray, int, list, list]:
    """Offsets (-1 for None), HWC shapes and the total bytes of ``images`` packed one after
    another with ``ALIGN``-byte alignment; and, for the images that are there, their device
    addresses and row pitches."""
    n = len(images)
    offsets = np.full(n, -1, np.int64)
    shapes = np.zeros((n, 3), np.int64)
    ptrs, pitches = [], []
    pos = 0
    for i, img in enumerate(images):
        if img is None:
            continue
        cai = img.__cuda_array_interface__
        shp = cai["shape"]
        h, w, c = shp[0], shp[1], (shp[2] if len(shp) > 2 else 1)
        shapes[i] = (h, w, c)
        strides = cai.get("strides")
        ptrs.append(cai["data"][0])
        pitches.append(strides[0] if strides else w * c)
        offsets[i] = pos
        pos += -(-int(h * w * c) // ALIGN) * ALIGN
    return offsets, shapes, pos, ptrs, pitches


_STACK_LIMIT = 0x00  # cudaLimitStackSize
STACK_BYTES = 256  # the decode process's per-thread stack limit (see Server.__init__)


class Server:
    """One decode process's state: its GPU, stream, decoders, slots and mapped regions."""

    def __init__(self, device_id: int, fd: int):
        import cupy

        self.rt = cupy.cuda.runtime
        self.device_id = device_id
        cupy.cuda.Device(device_id).use()
        # The context reserves local memory for every resident thread at the per-thread stack
        # limit (1 KB by default): ~200 MiB of the ~520 MiB a context takes on an H100. The
        # decoder's kernels need less; the driver raises the limit for a launch that needs
        # more (BENCHMARKS.md, "Decode processes and GPU memory").
        self.rt.deviceSetLimit(_STACK_LIMIT, STACK_BYTES)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.fd = fd
        self.memory: mmap.mmap | None = None  # the memfd, mapped as far as a batch needed
        self.slots: dict[int, tuple[int, int]] = {}  # slot -> (device address, bytes)
        self.decoders: dict[str, tuple] = {}  # configuration -> (decoder, params, spare)
        self.decoder = self.params = None
        self.spare: list = []  # the last batch's images, decoded into again
        self.pending: list | None = None  # images waiting for a larger slot
        self.regions: dict = {}  # key -> mmap of another process's shared memory
        self.event = 0  # the pipeline process's event (0: none, synchronise instead)

    def configure(self, config: dict) -> None:
        from nvidia import nvimgcodec as nvi

        from ..types import DALIImageType
        from ._codec import decode_params, new_decoder

        key = json.dumps(config, sort_keys=True)
        if key not in self.decoders:
            decoder = new_decoder(
                nvi,
                self.device_id,
                float(config["load"]),
                config["options"],
                int(config["threads"]),
            )
            params = decode_params(nvi, DALIImageType[config["output_type"]])
            self.decoders[key] = (decoder, params, [])
        self.decoder, self.params, self.spare = self.decoders[key]

    def input(self, count: int) -> memoryview:
        """The first ``count`` bytes of the memfd (mapped anew when a batch is larger than any
        before: the pipeline's process grows the memfd as it writes)."""
        if self.memory is None or len(self.memory) < count:
            # the old mapping stays while the last batch's arrays refer to it
            self.memory = mmap.mmap(self.fd, max(count, 1))
        return memoryview(self.memory)[:count]

    def decode(self, sizes: list[int], source: tuple | None = None) -> list:
        from nvidia import nvimgcodec as nvi

        from ._codec import decode_blobs

        if self.decoder is None:
            raise RuntimeError("no decoder configuration was sent")
        if source is None:
            ends = np.cumsum(sizes)
            count = int(ends[-1]) if len(sizes) else 0
            blobs = np.split(np.frombuffer(self.input(count), np.uint8), ends[:-1])
        else:
            key, offsets = source
            data = np.frombuffer(self.regions[key], np.uint8)
            blobs = [data[o : o + n] for o, n in zip(offsets, sizes, strict=True)]
        k = len(blobs)
        images = None
        if len(self.spare) >= k:
            images = [self.spare.pop() for _ in range(k)]
        out = decode_blobs(nvi, self.decoder, blobs, self.params, self.stream.ptr, images)
        if len(out) != len(blobs):  # the offsets would name the wrong samples
            raise RuntimeError(f"nvImageCodec returned {len(out)} images for {len(blobs)} samples")
        return out

    def copy(self, slot: int, images: list) -> Decoded | TooSmall:
        offsets, shapes, total, ptrs, pitches = layout(images)
        base, nbytes = self.slots[slot]
        if total > nbytes:
            self.pending = images
            return TooSmall(total)
        there = offsets >= 0
        h, w, c = shapes[there].T
        descs = copy_descriptors(ptrs, base + offsets[there], pitches, w * c, h)
        copy_batch(descs, self.device_id, self.stream)  # one launch for the batch
        if self.event:
            self.rt.eventRecord(self.event, self.stream.ptr)
        else:
            self.stream.synchronize()
        self.pending = None
        self.spare[:] = [img for img in images if img is not None]  # this decoder's list
        return Decoded(offsets, shapes, total)

    def handle(self, msg):
        """One message (see the module doc)."""
        match msg:
            case Decode(slot, sizes, source):
                return self.copy(slot, self.decode(sizes, source))
            case CopyInto(slot):
                if self.pending is None:
                    raise RuntimeError("no images wait for a larger buffer")
                return self.copy(slot, self.pending)
            case Configure(config):
                self.configure(config)
            case Open(slot, handle, nbytes):
                self.slots[slot] = (self.rt.ipcOpenMemHandle(handle), nbytes)
            case Drop(slot):
                self.rt.ipcCloseMemHandle(self.slots.pop(slot)[0])
            case Map(key, path, offset, size, inode):
                memory = open_region(path, offset, size, inode)
                if memory is not None:
                    self.regions[key] = memory
                return memory is not None
            case Unmap(key):
                self.regions.pop(key, None)
            case UseEvent(handle):
                self.event = self.rt.ipcOpenEventHandle(handle)
            case Trim():
                self.stream.synchronize()  # the last copies out of those images are done
                for _, _, spare in self.decoders.values():
                    spare.clear()
                self.regions.clear()
            case Ping():
                return "pong"
            case _:
                raise TypeError(f"unknown message {msg!r}")
        return None


def handler(device_id: int, fd: int):
    """The ``handle`` function of a decode server on GPU ``device_id`` (see ``_ipc.server``);
    raises when CUDA cannot be set up there (the decoder then decodes in its own process)."""
    return Server(device_id, fd).handle
