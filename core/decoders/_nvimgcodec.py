"""The mixed (GPU) image decoder: nvImageCodec with nvJPEG's hardware engines and the hybrid
CPU+GPU backend.

One ``decode`` call per batch. The hardware JPEG engines (A100, H100, ...) take the share
``hw_decoder_load`` of the batch; the hybrid backend (Huffman on the CPU, IDCT on the GPU) and
the full-GPU CUDA backend take the rest and whatever the hardware cannot decode (progressive
JPEG, for one). Samples that no GPU backend decodes (PNG, BMP, TIFF, WebP, ...) are decoded on the
CPU with :func:`~dlpipe.decoders.image.decode_cpu` and uploaded, inside the same batch; a sample
that does not decode anywhere raises :class:`DecodeError` carrying ``sample_index``, which the
executor turns into a message naming the file.

``decoders.image_random_crop`` decodes the whole image and hands out the crop window as a view
of it (no copy; the window comes from the decoded, EXIF-oriented size). With ``roi_decode`` set
on the decoder, the window comes from the header's size instead and only that region is
decoded (nvImageCodec's ROI decode; JPEGs with EXIF data are still decoded whole). The view is
the default because it is faster on an H100 (4,225 against 3,028 img/s for a batch of 128 with
16 reader threads, 2026-11-21): ROI decode needs two more calls into nvImageCodec per sample,
each of which gives up and takes back the GIL.

Decoded pixels stay in the images nvImageCodec allocated on the calling lane's stream; the
batch's arrays keep them alive, and they are released in stream order once nothing refers to
them. ``decode_batch`` may run in several GPU-stage lanes at once (``executor_gpu.py``): each
thread gets its own nvImageCodec decoder, so batches are decoded side by side. On Linux each
lane decodes in a process of its own instead (``_decode_process.py``), and the images arrive
in a device buffer shared with that process.
"""

from __future__ import annotations

import threading
import warnings
import weakref

import numpy as np

from .._image_header import truncated_jpeg
from .._ipc.process import HelperStartError
from .._ipc.slots import SlotPool
from ..errors import DecodeError, PipelineError, require_extra
from ..types import DALIImageType
from . import _decode_process
from ._codec import decode_blobs, decode_params, decoder_options, new_decoder
from .image import as_decode_error, decode_cpu

# Idle nvImageCodec decoders by (device, hardware load, options). A decoder is never destroyed
# while the process runs: a decoder destroyed while its images are alive, or (from the garbage
# collector, on whatever thread it runs) while other decoders are decoding, crashed the
# process on an H100. Pipelines hand theirs back here instead, for the next pipeline.
_IDLE: dict[tuple, list] = {}


def _has_exif(head: bytes) -> bool:
    return b"Exif\x00" in head


def refusal_error(op, reason: tuple) -> DecodeError:
    """The decoder ``op``'s error for a sample a decode process refused before decoding
    (``_decode_server.refusals``): the same errors as its own checks give."""
    if reason[0] == "size":
        return op.size_error(*reason[1:])
    return DecodeError(
        f"decoders.image: truncated JPEG ({reason[1]} bytes, no end-of-image marker)"
    )


class MixedDecoder:
    """nvImageCodec decoder for one ``decoders.image*`` operator (built in the GPU stage).

    Args:
        op: the operator (``output_type``, ``hw_decoder_load``, ``hybrid_huffman_threshold``;
            ``window`` for the random-crop decoder).
    """

    def __init__(self, op):
        self.nvimgcodec = nvi = require_extra("nvidia.nvimgcodec", "cuda13")
        self.cupy = require_extra("cupy", "cuda13")
        self.op = op
        self.output_type = op.output_type
        self.window = getattr(op, "window", None)
        self.roi_decode = False  # see module docstring
        self.device_id = self.cupy.cuda.runtime.getDevice()
        load = min(max(float(op.hw_decoder_load), 0.0), 1.0)
        self._options = decoder_options(op.hybrid_huffman_threshold)
        self._local = threading.local()
        # CPU threads of each nvImageCodec decoder (0: nvImageCodec's default, every core);
        # set by the GPU stage from the pipeline's num_threads.
        self._threads = int(getattr(op, "cpu_threads", 0))
        self._key = (self.device_id, load, self._options, self._threads)
        # The decoders this operator took from _IDLE, given back when it is collected.
        self._decoders: list = []
        weakref.finalize(self, _IDLE.setdefault(self._key, []).extend, self._decoders)
        self.gpu_output = self.output_type in (
            DALIImageType.RGB,
            DALIImageType.BGR,
            DALIImageType.GRAY,
            DALIImageType.ANY_DATA,
        )
        self.params = decode_params(nvi, self.output_type)
        # Each decode lane decodes in a process of its own (_decode_process.py), where the
        # platform allows; the processes go back to the pool when the pipeline closes.
        self.use_process = self.gpu_output and getattr(op, "decode_process", False)
        self._config = {
            "load": load,
            "options": self._options,
            "threads": self._threads,
            "output_type": self.output_type.name,
        }
        self._procs: list = []  # the processes this operator's lanes took
        self._generation = 0  # lanes take processes anew when it changes (close())
        # idle processes kept per GPU when this operator gives its back
        self._keep_idle = int(getattr(op, "idle_decode_processes", _decode_process.IDLE_PROCESSES))
        weakref.finalize(self, _decode_process.give_back, self._procs, self._keep_idle)
        if self.use_process:  # one per lane, starting while the pipeline warms up
            lanes = int(getattr(op, "decode_lanes", 1))
            try:
                _decode_process.prestart(self.device_id, lanes, self._config)
            except HelperStartError as e:  # no Python interpreter to run them here
                self._no_process(str(e))
        if not self.use_process:
            self._local.decoder = self._make_decoder()  # a bad configuration fails right here

    def _process(self):
        """This thread's decode process, or None: decode in this process."""
        if not self.use_process or (self.window is not None and self.roi_decode):
            return None
        gen, proc = getattr(self._local, "proc", (None, None))
        if gen == self._generation and proc.interrupted:  # a KeyboardInterrupt cut a request
            proc.close()
            gen = None
        if gen != self._generation:  # first use, first since close(), or a replacement
            try:
                proc = _decode_process.take(self.device_id)
            except HelperStartError as e:
                self._no_process(str(e))
                return None
            self._local.proc = (self._generation, proc)
            self._procs.append(proc)
        if not proc.ready():
            self._no_process(proc.failure)
            return None
        if proc.failure:  # an earlier batch's error was raised; do not talk to it again
            raise PipelineError(
                f"{self.op.schema}: the decode process failed earlier: {proc.failure}"
            )
        # the server checks what headers claim against the operator's limit (set at prepare)
        self._config["max_pixels"] = int(self.op.max_pixels)
        proc.configure(self._config, self.op.schema)
        return proc

    def _no_process(self, why: str) -> None:
        """Decode in this process from now on (every lane), and say why."""
        if self.use_process:
            warnings.warn(
                f"{self.op.schema}: decoding in the pipeline's process: {why}",
                RuntimeWarning,
                stacklevel=3,
            )
        self.use_process = False

    def close(self) -> None:
        """Give the decode processes back to the pool (the pipeline is closing: no lane is
        decoding); a later run takes them anew."""
        self._generation += 1
        _decode_process.give_back(self._procs, self._keep_idle)

    def _make_decoder(self):
        """An idle decoder of the same configuration, or a new one."""
        try:
            dec = _IDLE.setdefault(self._key, []).pop()
        except IndexError:  # list.pop is atomic: two lanes never get the same decoder
            dec = new_decoder(self.nvimgcodec, *self._key)
        self._decoders.append(dec)
        return dec

    @property
    def decoder(self):
        """This thread's nvImageCodec decoder (each lane thread gets its own)."""
        dec = getattr(self._local, "decoder", None)
        if dec is None:
            dec = self._local.decoder = self._make_decoder()
        return dec

    def _decode(self, blobs: list, stream, spare: SlotPool | None = None) -> list:
        """:func:`decode_blobs` with this thread's decoder; with ``spare``, images of earlier
        batches are decoded into where there are enough (only this lane takes from its pool;
        others only give back)."""
        images = spare.take_many(len(blobs)) if spare is not None else None
        return decode_blobs(self.nvimgcodec, self.decoder, blobs, self.params, stream.ptr, images)

    def _spare(self, n: int) -> SlotPool | None:
        """This thread's spare images (``_ipc.slots``), when the decoded images may be reused:
        only images that never leave the pipeline (``reuse_outputs``, set by the GPU stage
        when the decoder's output is not a pipeline output), which a consumer on another stream
        cannot be reading when its last Python reference goes.

        Invariant: an image is decoded into again only once no batch or view refers to it,
        and only on the lane's stream, after the GPU operators that read it: by the time its
        last reference went, the GPU stage had made the lane's stream wait for them
        (``executor_gpu.py``). So its release needs no event; at most ``2 n`` are kept (one
        batch being decoded into, one still read by the GPU operators)."""
        if not getattr(self.op, "reuse_outputs", False):
            return None
        spare = getattr(self._local, "spare", None)
        if spare is None:
            spare = self._local.spare = SlotPool()
        spare.keep = 2 * n
        return spare

    def decode_batch(self, samples, params, stream, skip: bool = False):
        """Decode a batch of encoded samples (1-D uint8 numpy arrays) into a SampleList: in
        the lane's decode process (``_from_process``) where there is one and the batch fits
        its shared memory, else in this process.

        A sample that decodes neither on the GPU nor on the CPU is a ``DecodeError``; with
        ``skip``, its index and message go into the returned dict instead (its row of the
        SampleList is empty), and the batch goes on.

        Returns:
            (SampleList, {sample index: error message}).
        """
        from ..tensors_gpu import SampleList

        n = len(samples)
        skipped: dict[int, str] = {}

        def failed(i: int, e: Exception) -> None:
            err = as_decode_error(e, "decoders.image")
            if not skip:
                err.sample_index = i
                if err is e:
                    raise err
                raise err from e
            skipped[i] = str(err)

        proc = self._process() if self.gpu_output else None
        got = None if proc is None else proc.decode(samples, stream)
        if got is not None:
            return self._from_process(got, samples, params, failed, skipped), skipped
        ptrs = [0] * n
        shapes: list = [None] * n
        strides: list = [None] * n
        owners: list = [None] * n
        blobs, where, cpu = [], [], []
        for i, data in enumerate(samples):
            try:  # a header claiming more than max_pixels: refused before any memory is taken
                self.op.check_size(data)
            except DecodeError as e:
                failed(i, e)
                continue
            if data.size < 4 or not self.gpu_output:
                cpu.append(i)
                continue
            # The CPU decoder's check: the hardware decoder turns a truncated JPEG into a
            # partly grey image without an error.
            if truncated_jpeg(data):
                failed(i, refusal_error(self.op, ("truncated", int(data.size))))
                continue
            blobs.append(data)
            where.append(i)
        done = set()
        if blobs:
            try:
                decoded = self._gpu_decode(blobs, where, params, stream, done, n)
            except PipelineError:  # the decode process failed: not the data's doing
                raise
            except Exception:
                if not skip:
                    raise
                # with skip, a batch the GPU backends refuse as a whole is decoded one by
                # one on the CPU, which names (and skips) the bad samples
                decoded, done = [None] * len(blobs), set()
            for i, got in zip(where, decoded, strict=True):
                if got is None:
                    cpu.append(i)
                else:
                    ptrs[i], shapes[i], strides[i], owners[i] = got
        for i in sorted(cpu):
            done.discard(i)
            got = self._on_cpu(samples[i], i, failed)
            if got is not None:
                ptrs[i], shapes[i], strides[i], owners[i] = got
        for i in skipped:  # an empty row; the executor replaces it
            shapes[i], strides[i] = (0, 0, 0), (0, 0, 1)
        todo = (
            [i for i in range(n) if i not in done and i not in skipped]
            if self.window is not None
            else []
        )
        if todo:  # the crop as a view of the decoded image (no copy)
            hw = np.array([shapes[i][:2] for i in todo], np.int64)
            drawn = getattr(params, "array", None)
            u = drawn[todo] if drawn is not None else np.stack([params[i] for i in todo])
            wins = self.window.windows(hw[:, 0], hw[:, 1], u)
            for i, (y, x, h, w) in zip(todo, wins.tolist(), strict=True):
                sy, sx, _ = strides[i]
                ptrs[i] += y * sy + x * sx
                shapes[i] = (h, w, shapes[i][2])
        st = np.asarray(strides, np.int64)  # bytes == elements for uint8
        out = SampleList(
            np.uint8,
            np.asarray(ptrs, np.uint64),
            np.asarray(shapes, np.int64),
            st,
            owners,
            self.device_id,
        )
        return out, skipped

    def _on_cpu(self, data, i: int, failed, check_size: bool = False):
        """Sample ``i`` decoded on the CPU and put on the GPU: (address, shape, strides, owner),
        or None when it failed (``failed`` raised or recorded the skip)."""
        try:
            if check_size:  # not checked before (a decode process refused or missed it)
                self.op.check_size(data)
            img = decode_cpu(data, self.output_type)
        except Exception as e:  # any error of the CPU backend (OpenCV's own too)
            failed(i, e)
            return None
        arr = self.cupy.asarray(img)  # on the current (pipeline) stream
        return arr.data.ptr, arr.shape, arr.strides, arr

    def _from_process(self, got, samples, params, failed, skipped: dict):
        """The SampleList of a batch a decode process decoded (``DecodeProcess.decode``'s
        ``got``), without a Python step per sample where every sample decoded: the server
        made the header checks (``_decode_server.refusals``, raised or skipped here in the
        sample order), and only the samples it did not decode go through the CPU decoder."""
        from ..tensors_gpu import SampleList

        lease, ptrs, shapes, refused = got
        n = len(samples)
        ptrs = ptrs.astype(np.int64)
        shapes = np.array(shapes, np.int64).reshape(n, 3)
        strides = np.stack([shapes[:, 1] * shapes[:, 2], shapes[:, 2], np.ones(n, np.int64)], 1)
        owners: list = [lease] * n
        cpu = [i for i in np.flatnonzero(ptrs == 0).tolist() if i not in refused]
        for i in sorted(set(cpu) | set(refused)):
            owners[i] = None
            if i in refused:
                failed(i, refusal_error(self.op, refused[i]))
                continue
            got = self._on_cpu(samples[i], i, failed, check_size=True)
            if got is not None:
                ptrs[i], shapes[i], strides[i], owners[i] = got
        for i in skipped:  # an empty row; the executor replaces it
            ptrs[i], shapes[i], strides[i] = 0, (0, 0, 0), (0, 0, 1)
        if self.window is not None:  # the crop as a view of the decoded image (no copy)
            todo = np.ones(n, bool)
            todo[list(skipped)] = False
            drawn = getattr(params, "array", None)
            if drawn is not None:
                u = drawn[todo]
            else:
                u = np.stack([params[i] for i in np.flatnonzero(todo).tolist()])
            wins = self.window.windows(shapes[todo, 0], shapes[todo, 1], u).astype(np.int64)
            y, x, h, w = wins.T
            ptrs[todo] += y * strides[todo, 0] + x * strides[todo, 1]
            shapes[todo, 0], shapes[todo, 1] = h, w
        return SampleList(np.uint8, ptrs.astype(np.uint64), shapes, strides, owners, self.device_id)

    def _gpu_decode(self, blobs, where, params, stream, done: set, n: int) -> list:
        """Decode ``blobs`` (the batch's samples ``where``) on the GPU: for each, (device
        address, HWC shape, strides, owner), or None where the sample did not decode."""
        if self.window is not None and self.roi_decode:
            images = self._decode_roi(blobs, [params[i] for i in where], stream, done, where)
            spare = None
        else:
            spare = self._spare(n)
            images = self._decode(blobs, stream, spare)
        out = []
        for img in images:
            if img is None:
                out.append(None)
                continue
            cai = img.__cuda_array_interface__
            shp = tuple(cai["shape"])
            st = cai.get("strides")
            # Its decoder lives as long as the process (_IDLE), and so does a lane's stream;
            # the GPU stage's own stream (no lanes) is kept here, before the image in the
            # tuple, which drops its items last to first.
            owner = (stream, img) if spare is None else spare.lease(img)
            strides = (shp[1] * shp[2], shp[2], 1) if st is None else tuple(st)
            out.append((cai["data"][0], shp, strides, owner))
        return out

    def _decode_roi(self, blobs, uniforms, stream, done: set, where: list) -> list:
        """ROI decode: the window from the header's size, only that region decoded (JPEGs with
        EXIF data, whose orientation may swap the axes, are decoded whole and cropped after)."""
        nvi = self.nvimgcodec
        streams, pos = [], []
        for k, (data, u) in enumerate(zip(blobs, uniforms, strict=True)):
            try:
                cs = nvi.CodeStream(data)
            except Exception:  # not a format nvImageCodec parses: CPU fallback
                continue
            if not _has_exif(bytes(data[:256])):
                y, x, h, w = self.window.window(cs.height, cs.width, u)
                cs = cs.get_sub_code_stream(region=nvi.Region(y, x, y + h, x + w))
                done.add(where[k])
            streams.append(cs)
            pos.append(k)
        out = [None] * len(blobs)
        if streams:
            images = self.decoder.decode(streams, params=self.params, cuda_stream=stream.ptr)
            for k, img in zip(pos, images, strict=True):
                out[k] = img
        return out
