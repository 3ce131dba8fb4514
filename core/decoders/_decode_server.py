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

A batch is decoded straight into the slot: the shapes come from the samples' headers
(nvImageCodec's ``CodeStream``), each image's place in the slot is wrapped as an nvImageCodec
image (``as_images``) and the decoder writes there. The process then holds no images of its
own and launches no copy: about 200 MiB less per process on the H100 (BENCHMARKS.md, "Decode
processes and GPU memory"). A batch it cannot place so (a header nvImageCodec cannot parse, a
decode that refuses the buffers) is decoded into images of this process, which one kernel
then copies into the slot; those images are kept and decoded into by the next such batch.

The reply to a decode comes once the decode (and any copies) is queued on this process's
stream, followed by the event: the pipeline's process makes its stream wait for that event
before it reads the buffer.
"""

from __future__ import annotations

import json
import mmap
from dataclasses import dataclass, field

import numpy as np

from .._image_header import claimed_size, truncated_jpeg
from .._ipc.regions import Map, Unmap, open_region
from ..kernels.copy import copy_batch, copy_descriptors

ALIGN = 256


@dataclass(frozen=True)
class Configure:
    """Decode with ``config`` from now on: ``load`` (the hardware engines' share), ``options``,
    ``threads`` and ``output_type`` (a ``DALIImageType`` name), and ``max_pixels`` (the
    decoder's limit on what a header may claim; none when absent). A decoder is made per
    configuration (``max_pixels`` aside) and kept."""

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
    """Decode (or copy) the batch kept after :class:`TooSmall` into the larger buffer
    ``slot``."""

    slot: int


@dataclass(frozen=True)
class Decoded:
    """Where each image lies in the slot (int64, -1 where a sample did not decode: the
    pipeline's process decodes it on the CPU, unless it is ``refused``), its HWC shape, the
    bytes used, and the samples refused before decoding (see :func:`refusals`)."""

    offsets: np.ndarray
    shapes: np.ndarray
    nbytes: int
    refused: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TooSmall:
    """The images need ``nbytes``, more than the buffer has; the batch's encoded samples are
    kept to be decoded by a :class:`CopyInto` a larger one."""

    nbytes: int


def layout(images: list) -> tuple[np.ndarray, np.ndarray, int, list, list]:
    """Offsets (-1 for None), HWC shapes and the total bytes of ``images`` packed one after
    another with ``ALIGN``-byte alignment; and, for the images that are there, their device
    addresses and row pitches."""
    n = len(images)
    offsets = np.full(n, -1, np.int64)
    shapes = np.zeros((n, 3), np.int64)
    ptrs, pitches = [], []
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
    there = np.array([img is not None for img in images], bool).reshape(n)
    offsets[there], total = pack(shapes[there])
    return offsets, shapes, total, ptrs, pitches


def refusals(blobs: list[np.ndarray], max_pixels: int | None) -> dict[int, tuple]:
    """The samples refused before decoding, by index: ``("size", format, height, width)``
    where the header claims more than ``max_pixels`` pixels (a decompression bomb),
    ``("truncated", nbytes)`` for a JPEG without its end-of-image marker (the hardware
    decoder would give a partly grey image without an error). The pipeline's process turns
    them into the decoder's ``DecodeError`` (``_nvimgcodec.refusal_error``); the checks run
    here so that it walks no header itself."""
    out: dict[int, tuple] = {}
    for i, data in enumerate(blobs):
        if data.size < 4:
            continue  # decoded (and refused) by the CPU decoder
        if max_pixels is not None:
            claim = claimed_size(data)
            if claim is not None and claim[1] * claim[2] > max_pixels:
                out[i] = ("size", *claim)
                continue
        if truncated_jpeg(data):
            out[i] = ("truncated", int(data.size))
    return out


def pack(shapes: np.ndarray) -> tuple[np.ndarray, int]:
    """Offsets of images of HWC ``shapes`` (uint8) laid one after another, each ``ALIGN``-byte
    aligned, and the total bytes: the layout ``layout`` gives decoded images, computed from
    their headers before decoding."""
    sizes = shapes.prod(axis=1) if len(shapes) else np.zeros(0, np.int64)
    padded = -(-sizes // ALIGN) * ALIGN
    offsets = np.zeros(len(shapes), np.int64)
    np.cumsum(padded[:-1], out=offsets[1:])
    return offsets, int(padded.sum())


class _SlotView:
    """A place in a slot, as nvImageCodec's ``as_images`` reads it: the CUDA array interface
    of a contiguous uint8 HWC array (version 2: no stream of its own)."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, ptr: int, shape: tuple):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": "|u1",
            "data": (ptr, False),
            "strides": None,
            "version": 2,
        }


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
        self.spare: list = []  # the last copied batch's images, decoded into again
        self.channels = 3  # of the images the decoder gives (1 for GRAY)
        self.max_pixels: int | None = None
        self.pending: list | None = None  # a batch's encoded samples, waiting for a larger
        # slot
        self.regions: dict = {}  # key -> mmap of another process's shared memory
        self.event = 0  # the pipeline process's event (0: none, synchronise instead)

    def configure(self, config: dict) -> None:
        from nvidia import nvimgcodec as nvi

        from ..types import DALIImageType
        from ._codec import decode_params, new_decoder

        self.max_pixels = config.get("max_pixels")
        config = {k: v for k, v in config.items() if k != "max_pixels"}
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
        self.channels = 1 if config["output_type"] == DALIImageType.GRAY.name else 3

    def input(self, count: int) -> memoryview:
        """The first ``count`` bytes of the memfd (mapped anew when a batch is larger than any
        before: the pipeline's process grows the memfd as it writes)."""
        if self.memory is None or len(self.memory) < count:
            # the old mapping stays while the last batch's arrays refer to it
            self.memory = mmap.mmap(self.fd, max(count, 1))
        return memoryview(self.memory)[:count]

    def blobs(self, sizes: list[int], source: tuple | None) -> list[np.ndarray]:
        """The batch's encoded samples, where the pipeline's process put them."""
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
        return blobs

    def decode_into(self, slot: int, streams: list) -> Decoded | TooSmall:
        """Decode ``streams`` (nvImageCodec CodeStreams) straight into buffer ``slot``, laid
        out by ``pack`` from their headers (``TooSmall`` when they do not fit: nothing is
        decoded). An image the decoder put elsewhere or with other
        strides than its place (it may turn an image by its EXIF orientation: the same bytes,
        rows of another length) is reported with its own shape or copied into its place.

        Raises:
            Exception: from nvImageCodec, when it refuses a buffer (an image larger than its
                header said): the batch is then decoded by ``decode``.
        """
        from nvidia import nvimgcodec as nvi

        c = self.channels
        shapes = np.array([(s.height, s.width, c) for s in streams], np.int64).reshape(-1, 3)
        offsets, total = pack(shapes)
        base, nbytes = self.slots[slot]
        if total > nbytes:
            return TooSmall(total)
        ptr = self.stream.ptr
        views = [
            _SlotView(base + int(o), (int(h), int(w), c))
            for o, (h, w, _) in zip(offsets, shapes, strict=True)
        ]
        images = nvi.as_images(views, cuda_stream=ptr)
        out = self.decoder.decode(streams, params=self.params, cuda_stream=ptr, images=images)
        if len(out) != len(streams):  # the offsets would name the wrong samples
            raise RuntimeError(f"nvImageCodec returned {len(out)} images for {len(streams)}")
        for i, img in enumerate(out):
            if img is None:
                offsets[i] = -1
                continue
            cai = img.__cuda_array_interface__
            shape = tuple(cai["shape"]) + (1,) * (3 - len(cai["shape"]))
            if cai["data"][0] == base + offsets[i] and cai.get("strides") is None:
                shapes[i] = shape  # in place (turned by its orientation: the same bytes)
            else:
                self._move(img, base + int(offsets[i]), shape, int(shapes[i].prod()))
                shapes[i] = shape
        if self.event:
            self.rt.eventRecord(self.event, ptr)
        else:
            self.stream.synchronize()
        self.pending = None
        return Decoded(offsets, shapes, total)

    def _move(self, img, dst: int, shape: tuple, room: int) -> None:
        """Copy ``img`` (strided, or elsewhere) contiguous to ``dst``, ``room`` bytes."""
        import cupy

        if int(np.prod(shape)) > room:
            raise RuntimeError(f"a decoded image of shape {shape} is larger than its header said")
        with self.stream:
            src = cupy.ascontiguousarray(cupy.asarray(img))  # a copy: src may overlap dst
            mem = cupy.cuda.UnownedMemory(dst, src.nbytes, self)
            out = cupy.ndarray(src.shape, cupy.uint8, cupy.cuda.MemoryPointer(mem, 0))
            out[...] = src

    def streams(self, blobs: list[np.ndarray]) -> list | None:
        """nvImageCodec CodeStreams of ``blobs`` (headers parsed), or None when one does not
        parse (the general path then decodes what it can, the rest on the CPU)."""
        from nvidia import nvimgcodec as nvi

        try:
            return [nvi.CodeStream(b) for b in blobs]
        except Exception:
            return None

    def decode(self, blobs: list[np.ndarray]) -> list:
        """``blobs`` decoded into images of this process (None where one did not decode)."""
        from nvidia import nvimgcodec as nvi

        from ._codec import decode_blobs

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

    def decode_batch(self, slot: int, blobs: list[np.ndarray]) -> Decoded | TooSmall:
        """Decode ``blobs`` (encoded arrays) into ``slot``, but for the ``refusals`` and the
        samples too short to be an image: straight there where it can, else through images
        of this process and a copy."""
        refused = refusals(blobs, self.max_pixels)
        keep = [i for i, b in enumerate(blobs) if i not in refused and b.size >= 4]
        todo = [blobs[i] for i in keep] if len(keep) < len(blobs) else blobs
        reply = None
        streams = self.streams(todo)
        if streams is not None:
            try:
                reply = self.decode_into(slot, streams)
            except Exception:  # a buffer refused: decoded below (that path raises for real)
                reply = None
        if reply is None:
            reply = self.copy(slot, self.decode(todo))
        if isinstance(reply, TooSmall):
            self.pending = blobs  # decoded again into the larger slot (rare: the first
            # batches of a process, a batch of larger images)
            return reply
        if todo is blobs:
            return Decoded(reply.offsets, reply.shapes, reply.nbytes, refused)
        offsets = np.full(len(blobs), -1, np.int64)
        shapes = np.zeros((len(blobs), 3), np.int64)
        offsets[keep], shapes[keep] = reply.offsets, reply.shapes
        return Decoded(offsets, shapes, reply.nbytes, refused)

    def handle(self, msg):
        """One message (see the module doc)."""
        match msg:
            case Decode(slot, sizes, source):
                return self.decode_batch(slot, self.blobs(sizes, source))
            case CopyInto(slot):
                if self.pending is None:
                    raise RuntimeError("no batch waits for a larger buffer")
                return self.decode_batch(slot, self.pending)
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
