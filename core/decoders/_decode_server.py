"""The decode process behind the mixed decoder: nvImageCodec decoding in a process of its own.

Started by ``_decode_process.DecodeProcess`` as ``python -m dlpipe.decoders._decode_server
DEVICE FD``. ``FD`` is a memfd that both processes map, into which the pipeline's process writes
a batch's encoded samples one after another; ``DEVICE`` is the GPU. Messages are pickles,
requests on stdin and replies on stdout:

* first, unasked: ``("ready",)``, or ``("error", message)`` when CUDA cannot be set up;
* ``("config", config)``: decode with this configuration from now on: ``load`` (the hardware
  engines' share), ``options``, ``threads`` and ``output_type`` (a ``DALIImageType`` name).
  A decoder is made per configuration and kept (no reply);
* ``("ping",)``: reply ``("pong",)``, once every request before it is done;
* ``("trim",)``: let go of the images kept for the next batch, of every configuration, and of
  the regions mapped (the process goes idle; no reply);
* ``("event", handle)``: the pipeline process's interprocess CUDA event, recorded after each
  batch's copies (no reply);
* ``("open", slot, handle, nbytes)``: a device buffer of the pipeline's process, by its CUDA IPC
  handle (no reply); ``("drop", slot)``: close it (no reply);
* ``("map", key, path, size, inode)``: map another process's shared memory (a read process's
  slots, ``_helper_process.Region``). Reply ``("mapped", ok)``; kept until ``("trim",)``;
* ``("decode", slot, sizes, source)``: decode the batch (its samples back to back from the
  start of ``FD`` when ``source`` is None, else at ``offsets`` in the region ``key`` for
  ``source = (key, offsets)``) and copy the images, one after another and 256-byte aligned,
  into buffer ``slot`` (one kernel launch, ``kernels/copy.py``). Reply
  ``("ok", offsets, shapes, nbytes)``: int64 arrays, the offset -1 where a sample did not
  decode (the pipeline's process decodes those on the CPU), and the bytes used; or
  ``("big", nbytes)``: the images need more than the buffer has, and are kept for the
  ``("copy", slot)`` that follows with a larger buffer (same replies);
* a failure replies ``("error", message)``.

The reply comes once the copies are queued on this process's stream, followed by the event:
the pipeline's process makes its stream wait for that event before it reads the buffer. The
next batch is decoded on the same stream, so the images are decoded into again only after
their copies. EOF on stdin (the pipeline closed, or its process died) ends this process.
"""

from __future__ import annotations

import json
import mmap
import os
import pickle
import sys
import traceback

import numpy as np

from .._helper_process import open_region
from ..kernels.copy import copy_batch, copy_descriptors

ALIGN = 256


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


class Server:
    def __init__(self, fd: int, device_id: int):
        import cupy

        self.rt = cupy.cuda.runtime
        self.device_id = device_id
        cupy.cuda.Device(device_id).use()
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.memory = mmap.mmap(fd, os.fstat(fd).st_size)
        self.slots: dict[int, tuple[int, int]] = {}  # slot -> (device address, bytes)
        self.decoders: dict[str, tuple] = {}  # configuration -> (decoder, params, spare)
        self.decoder = self.params = None
        self.spare: list = []  # the last batch's images, decoded into again
        self.pending: tuple | None = None  # images waiting for a larger slot
        self.regions: dict = {}  # key -> mmap of another process's shared memory
        self.event = 0  # the pipeline process's event (0: none, synchronise instead)

    def configure(self, config: dict) -> None:
        from nvidia import nvimgcodec as nvi

        from ..types import DALIImageType
        from ._nvimgcodec import decode_params, new_decoder

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

    def decode(self, sizes: list[int], source: tuple | None = None) -> tuple:
        from nvidia import nvimgcodec as nvi

        from ._nvimgcodec import decode_blobs

        if self.decoder is None:
            raise RuntimeError("no decoder configuration was sent")
        if source is None:
            ends = np.cumsum(sizes)
            count = int(ends[-1]) if len(sizes) else 0
            blobs = np.split(np.frombuffer(self.memory, np.uint8, count=count), ends[:-1])
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

    def copy(self, slot: int, images: list) -> tuple:
        offsets, shapes, total, ptrs, pitches = layout(images)
        base, nbytes = self.slots[slot]
        if total > nbytes:
            self.pending = images
            return ("big", total)
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
        return ("ok", offsets, shapes, total)

    def handle(self, req: tuple) -> tuple | None:
        kind = req[0]
        if kind == "config":
            self.configure(req[1])
            return None
        if kind == "ping":
            return ("pong",)
        if kind == "trim":
            self.stream.synchronize()  # the last copies out of those images are done
            for _, _, spare in self.decoders.values():
                spare.clear()
            self.regions.clear()
            return None
        if kind == "map":
            _, key, path, size, inode = req
            memory = open_region(path, size, inode)
            if memory is not None:
                self.regions[key] = memory
            return ("mapped", memory is not None)
        if kind == "event":
            self.event = self.rt.ipcOpenEventHandle(req[1])
            return None
        if kind == "open":
            _, slot, handle, nbytes = req
            self.slots[slot] = (self.rt.ipcOpenMemHandle(handle), nbytes)
            return None
        if kind == "drop":
            self.rt.ipcCloseMemHandle(self.slots.pop(req[1])[0])
            return None
        if kind == "decode":
            return self.copy(req[1], self.decode(req[2], req[3]))
        if kind == "copy":
            return self.copy(req[1], self.pending)
        return ("error", f"unknown request {kind!r}")


def serve(fd: int, device_id: int) -> None:
    # Replies get a descriptor of their own: the libraries print (nvImageCodec's warnings go
    # to standard output), so standard output goes to standard error from here on.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer

    def send(msg):
        pickle.dump(msg, replies, protocol=5)
        replies.flush()

    try:
        server = Server(fd, device_id)
    except Exception as e:
        send(("error", f"{type(e).__name__}: {e}"))
        return
    send(("ready",))
    while True:
        try:
            req = pickle.load(requests)
        except EOFError:
            return
        try:
            reply = server.handle(req)
        except Exception:
            reply = ("error", traceback.format_exc(limit=4))
        if reply is not None:
            send(reply)


if __name__ == "__main__":
    serve(int(sys.argv[2]), int(sys.argv[1]))
