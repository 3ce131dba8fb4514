"""GPU decoding for ``fn.readers.video(device="gpu")``: NVDEC through PyNvVideoCodec.

The reader draws the batch's sequences on the CPU stage; this mixed operator
(``_video_decode_gpu``) decodes them on the GPU stage:

1. The batch's output is allocated on the pipeline's stream (one dense (N, F, H, W, 3) array
   when every sequence has the same frame size) and an event marks the allocation.
2. The sequences are grouped into *units*: consecutive sequences of one file whose next start
   is reached at least as cheaply by decoding on as by seeking (no keyframe in between) share
   a unit, so they are decoded in one pass; units are capped so that a batch spreads over the
   decoder sessions.
3. ``num_decoders`` worker threads, each owning one ``SimpleDecoder`` (NVDEC session, RGB
   conversion on the GPU) and one CUDA stream, decode units in parallel. The decoder runs on
   its worker's stream, and the frames are copied into the output on that same stream, so a
   decoder surface is never overwritten before its copy ran. Each unit ends with an event that
   the pipeline's stream waits on; the host never waits for the GPU.
4. dtype conversion and the small outputs (label, frame number, timestamps) follow on the
   pipeline's stream.

Nothing here imports CuPy or PyNvVideoCodec until the first batch is decoded.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._ipc.slots import SlotPool
from ..errors import ArgumentError, DecodeError, DeviceError, MissingExtraError, require_extra
from ..graph import Operator, register
from ._video_index import WHO, VideoInfo

CHUNK = 32  # frames asked from a decoder at once (bounds the decoder surfaces held)
EXTRA = "video-gpu"


def check_nvc_installed() -> None:
    """Build-time check (without loading the driver): PyNvVideoCodec is importable."""
    if sys.modules.get("PyNvVideoCodec") is None and not importlib.util.find_spec("PyNvVideoCodec"):
        raise MissingExtraError(
            f"{WHO}(device='gpu') needs PyNvVideoCodec, which is not installed; "
            f'install it with: pip install "dlpipe[{EXTRA}]"'
        )


def import_nvc():
    try:
        return require_extra("PyNvVideoCodec", EXTRA)
    except MissingExtraError:
        raise
    except Exception as e:  # its import probes the driver: no GPU, no NVDEC library, ...
        raise DeviceError(
            f"{WHO}(device='gpu'): PyNvVideoCodec cannot start (an NVIDIA driver with video "
            f"decode support is needed): {e}"
        ) from e


def plan_units(reader, seqs: list[int], num_decoders: int) -> list[list[tuple[int, np.ndarray]]]:
    """Group a batch's sequences into decode units of ``(sample index, frames)``.

    A sequence joins the previous unit when it is in the same file, starts at or after the
    previous sequence's start, and no keyframe lies between the previous sequence's last frame
    and its first (decoding on is then no more work than seeking). A unit holds at most
    ceil(N / num_decoders) sequences so that the batch spreads over the decoders.
    """
    cap = max(1, -(-len(seqs) // num_decoders))
    units: list[list[tuple[int, np.ndarray]]] = []
    prev = None  # (file, first frame, last frame)
    for i, seq in enumerate(seqs):
        frames = reader.sequence_frames(seq)
        valid = frames[frames >= 0]
        f = int(reader.seq_file[seq])
        info: VideoInfo = reader.videos[f]
        first, last = int(valid[0]), int(valid[-1])
        if (
            units
            and prev is not None
            and prev[0] == info.path
            and first >= prev[1]
            and info.keyframe_before(first) <= prev[2] + 1
            and len(units[-1]) < cap
        ):
            units[-1].append((i, valid))
            prev = (info.path, first, max(last, prev[2]))
        else:
            units.append([(i, valid)])
            prev = (info.path, first, last)
    return units


class _Session:
    """One decoder session and the CUDA stream it runs on (a slot of ``_sessions``)."""

    def __init__(self, cupy):
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.decoder = None
        self.path: str | None = None


class NvdecBatchDecoder:
    """Decodes batches of sequences of ``reader`` on the current GPU (see the module doc)."""

    def __init__(self, reader):
        self.nvc = import_nvc()
        self.cupy = require_extra("cupy", "cuda13")
        self.reader = reader
        self.device_id = self.cupy.cuda.runtime.getDevice()
        self.native = reader.image_type == "YCbCr"
        self.max_width = max(v.width for v in reader.videos)
        self.max_height = max(v.height for v in reader.videos)
        # DLPIPE_NVDEC_MODE=seek: seek_to_index + sequential get_batch_frames instead of
        # get_batch_frames_by_index (a fallback should a PyNvVideoCodec version index frames
        # differently).
        self.mode = os.environ.get("DLPIPE_NVDEC_MODE", "index")
        n = reader.num_decoders
        # The sessions, taken by the worker threads for a unit each (``_ipc.slots``).
        # Invariant: a session is used by one unit at a time, and its decoder surfaces are
        # written again only by the next unit on the same stream, after this unit's copies;
        # so it comes back with no event, as soon as the unit's work is queued.
        self._sessions: SlotPool[_Session] = SlotPool()
        with self.cupy.cuda.Device(self.device_id):
            for _ in range(n):
                self._sessions.put(_Session(self.cupy))
        self._pool = ThreadPoolExecutor(n, thread_name_prefix="dlpipe-nvdec")
        self._lock = threading.Lock()

    # --- one decoder session ------------------------------------------------------------------
    def _acquire(self, path: str) -> _Session:
        """A free session, preferring one whose decoder already has ``path`` open, else the
        least recently used (waits for one to come back)."""
        return self._sessions.take(prefer=lambda s: s.path == path, wait=True)

    def _release(self, slot: _Session) -> None:
        self._sessions.put(slot)

    def _decoder(self, slot: _Session, info: VideoInfo):
        nvc = self.nvc
        if slot.decoder is not None and slot.path == info.path:
            return slot.decoder
        if slot.decoder is not None:
            try:
                slot.decoder.reconfigure_decoder(info.path)
                slot.path = info.path
                return slot.decoder
            except Exception:
                slot.decoder = None  # cannot be reused for this file: make a new one
        color = nvc.OutputColorType.NATIVE if self.native else nvc.OutputColorType.RGB
        try:
            slot.decoder = nvc.SimpleDecoder(
                info.path,
                gpu_id=self.device_id,
                cuda_stream=slot.stream.ptr,
                use_device_memory=True,
                max_width=self.max_width,
                max_height=self.max_height,
                output_color_type=color,
            )
        except Exception as e:
            slot.decoder, slot.path = None, None
            raise DecodeError(
                f"{WHO}: NVDEC cannot decode {info.path!r} ({info.codec}, "
                f"{info.width}x{info.height}): {e}"
            ) from e
        slot.path = info.path
        return slot.decoder

    def _as_array(self, frame):
        cupy = self.cupy
        try:
            return cupy.from_dlpack(frame)
        except Exception:
            return cupy.asarray(frame)  # __cuda_array_interface__

    def _to_image(self, arr, info: VideoInfo):
        """A decoded frame as (H, W, 3) on the device: RGB (interleaved or planar) or, for
        NATIVE output, NV12 turned into YCbCr with nearest chroma upsampling."""
        cupy = self.cupy
        h, w = info.height, info.width
        if not self.native:
            if arr.ndim == 3 and arr.shape[-1] == 3:
                img = arr
            elif arr.ndim == 3 and arr.shape[0] == 3:
                img = arr.transpose(1, 2, 0)
            else:
                raise DecodeError(
                    f"{WHO}: unexpected RGB frame shape {arr.shape} from {info.path!r}"
                )
            return img[:h, :w]
        plane = arr.reshape(arr.shape[0], -1)
        if plane.shape[0] < h + (h + 1) // 2:
            raise DecodeError(
                f"{WHO}: {info.path!r}: NATIVE frame {arr.shape} is not NV12 (4:2:0 8-bit); "
                "image_type=YCbCr on the GPU supports 4:2:0 8-bit video"
            )
        img = cupy.empty((h, w, 3), cupy.uint8)
        img[:, :, 0] = plane[:h, :w]
        uv = plane[h : h + (h + 1) // 2, : 2 * ((w + 1) // 2)].reshape((h + 1) // 2, -1, 2)
        up = cupy.repeat(cupy.repeat(uv, 2, axis=0), 2, axis=1)[:h, :w]
        img[:, :, 1:] = up
        return img

    def _decode_unit(self, unit, seqs: list[int], outs, ready) -> object:
        cupy = self.cupy
        sample = unit[0][0]
        info = self.reader.videos[int(self.reader.seq_file[seqs[sample]])]
        slot = self._acquire(info.path)
        try:
            with cupy.cuda.Device(self.device_id), slot.stream:
                slot.stream.wait_event(ready)
                targets: dict[int, list[tuple[int, int]]] = {}
                for i, frames in unit:
                    for j, f in enumerate(frames.tolist()):
                        targets.setdefault(f, []).append((i, j))
                decoder = self._decoder(slot, info)
                for index, frame in self._frames(decoder, sorted(targets), info):
                    img = self._to_image(self._as_array(frame), info)
                    for i, j in targets[index]:
                        outs[i][j] = img
                event = cupy.cuda.Event(block=False, disable_timing=True)
                event.record(slot.stream)
                return event
        except DecodeError as e:
            slot.decoder, slot.path = None, None
            e.sample_index = sample
            raise
        except Exception as e:
            slot.decoder, slot.path = None, None
            err = DecodeError(f"{WHO}: NVDEC failed on {info.path!r}: {e}")
            err.sample_index = sample
            raise err from e
        finally:
            self._release(slot)

    def _frames(self, decoder, wanted: list[int], info: VideoInfo):
        """Yield (frame index, decoded frame) for ``wanted`` (ascending)."""
        if self.mode == "seek":
            first, last = wanted[0], wanted[-1]
            want = set(wanted)
            decoder.seek_to_index(first)
            index = first
            while index <= last:
                got = decoder.get_batch_frames(min(CHUNK, last - index + 1))
                if not got:
                    break
                for frame in got:
                    if index in want:
                        yield index, frame
                    index += 1
            if index <= last:
                raise DecodeError(
                    f"{WHO}: NVDEC returned frames up to {index - 1} of {info.path!r}, "
                    f"{last} was asked ({info.num_frames} frames by the index)"
                )
            return
        for k in range(0, len(wanted), CHUNK):
            chunk = wanted[k : k + CHUNK]
            got = decoder.get_batch_frames_by_index(chunk)
            if len(got) != len(chunk):
                raise DecodeError(
                    f"{WHO}: NVDEC returned {len(got)} of frames {chunk[0]}..{chunk[-1]} of "
                    f"{info.path!r} ({info.num_frames} frames by the index, "
                    f"{len(decoder)} by the decoder)"
                )
            yield from zip(chunk, got, strict=True)

    # --- one batch ----------------------------------------------------------------------------
    def decode(self, seqs: list[int], stream):
        cupy, reader = self.cupy, self.reader
        n, length = len(seqs), reader.sequence_length
        sizes = {
            (
                reader.videos[int(reader.seq_file[s])].height,
                reader.videos[int(reader.seq_file[s])].width,
            )
            for s in seqs
        }
        padded = any(int(reader.sequence_frames(s)[-1]) < 0 for s in seqs)
        alloc = cupy.zeros if padded else cupy.empty
        with cupy.cuda.Device(self.device_id), stream:
            if len(sizes) == 1:
                h, w = sizes.pop()
                dense = alloc((n, length, h, w, 3), cupy.uint8)
                outs = [dense[i] for i in range(n)]
            else:
                dense = None
                outs = []
                for s in seqs:
                    v = reader.videos[int(reader.seq_file[s])]
                    outs.append(alloc((length, v.height, v.width, 3), cupy.uint8))
            ready = cupy.cuda.Event(block=False, disable_timing=True)
            ready.record(stream)
        units = plan_units(reader, seqs, reader.num_decoders)
        with self._lock:  # one batch at a time uses the decoders
            futures = [self._pool.submit(self._decode_unit, u, seqs, outs, ready) for u in units]
            events, error = [], None
            for fut in futures:
                try:
                    events.append(fut.result())
                except Exception as e:
                    error = error or e
            if error is not None:
                raise error
        with cupy.cuda.Device(self.device_id), stream:
            for event in events:
                stream.wait_event(event)
            video = dense if dense is not None else outs
            if reader.out_dtype != np.uint8:
                scale = 1.0 / 255.0 if reader.normalized else 1.0

                def convert(a):
                    b = a.astype(cupy.float32)
                    if scale != 1.0:
                        b *= cupy.float32(scale)
                    return b

                video = convert(dense) if dense is not None else [convert(a) for a in outs]
            results = [video]
            extras = [reader.extra_outputs(s, reader.sequence_frames(s)) for s in seqs]
            for k in range(reader.num_outputs - 1):
                results.append(cupy.asarray(np.stack([e[k] for e in extras])))
        return tuple(results)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@register
class VideoDecodeGpu(Operator):
    """The GPU half of ``fn.readers.video(device="gpu")`` (built by the reader, not by users):
    takes the sequence indices the reader drew and decodes them with NVDEC."""

    schema = "_video_decode_gpu"
    devices = ("mixed",)
    num_inputs = (1, 1)

    def setup(self, *, reader=None) -> None:
        if reader is None:
            raise ArgumentError(f"{self.schema}: built by readers.video(device='gpu') only")
        check_nvc_installed()
        self.reader = reader
        self.num_outputs = reader.num_outputs
        self._impl: NvdecBatchDecoder | None = None

    def output_devices(self) -> list[str]:
        return ["gpu"] * self.num_outputs

    def output_layouts(self, input_layouts):
        return self.reader.layouts()

    def run_batch(self, inputs, args, params, stream):
        if self._impl is None:
            self._impl = NvdecBatchDecoder(self.reader)
        seqs = [int(np.asarray(x).reshape(-1)[0]) for x in inputs[0]]
        return self._impl.decode(seqs, stream)
