"""``fn.decoders.image`` and ``fn.decoders.image_random_crop``.

CPU: OpenCV's ``imdecode`` (libjpeg-turbo with its default IDCT and upsampling, which matches
DALI's CPU decode bit for bit on JPEG), then a colour conversion. Output is HWC, uint8 unless
``dtype`` says otherwise.
Mixed: nvImageCodec (nvJPEG hardware engines + hybrid backend) in ``_nvimgcodec.py``, loaded
only when a mixed decoder is built.

EXIF orientation is applied unless ``adjust_orientation=False`` (as in DALI's nvImageCodec
decoder). A truncated JPEG (no end-of-image marker) is an error rather than a half-grey picture.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import cv2
import numpy as np

from .._argcheck import check_int
from .._dtype import parse_dtype
from .._geometry.crop_window import RandomCropWindow
from .._image_header import claimed_size, jpeg_frame
from .._image_header import jpeg_has_end as _jpeg_has_end
from ..errors import ArgumentError, DecodeError, SampleSkipped
from ..graph import Operator, Rows, Skipped, register
from ..options import RuntimeOptions
from ..types import DALIImageType, to_image_type
from . import _decode_process

cv2.setNumThreads(1)  # dlpipe parallelises across samples; nested OpenCV threads only contend


_DTYPES = (np.uint8, np.uint16, np.float32)
_GPU_INIT = threading.Lock()  # one MixedDecoder per operator, whichever lane asks first


def decode_cpu(
    data: np.ndarray,
    output_type: DALIImageType,
    adjust_orientation: bool = True,
    dtype=np.uint8,
    file_channels: bool = False,
) -> np.ndarray:
    """Decode an encoded image (1-D uint8) to HWC in ``output_type`` colours.

    Args:
        data: the encoded file.
        output_type: the colour space of the output.
        adjust_orientation: apply the EXIF orientation (default True).
        dtype: uint8 (default), uint16 or float32; values are scaled to the type's dynamic
            range ([0, 1] for float), from the file's own bit depth.
        file_channels: with ``ANY_DATA``, keep the file's own channels (1 for grayscale, RGBA
            with alpha), as the CPU operator does; False gives RGB (what the mixed decoder
            writes for ANY_DATA, and its CPU fallback calls this without the flag).
    """
    dtype = np.dtype(dtype)
    if data.size == 0:
        raise DecodeError("decoders.image: empty input (0 bytes)")
    head = bytes(data[:4])
    if head[:2] == b"\xff\xd8" and not _jpeg_has_end(data):
        raise DecodeError(
            f"decoders.image: truncated JPEG ({data.size} bytes, no end-of-image marker)"
        )
    if head[:4] == b"\x89PNG":
        _check_png_chunks(data)
    any_data = output_type == DALIImageType.ANY_DATA and file_channels
    frame = jpeg_frame(data) if head[:2] == b"\xff\xd8" else None
    if frame is not None and frame[2] == 4:  # CMYK or YCCK: DALI's conversion, not OpenCV's
        img = _decode_cmyk_jpeg(data, output_type == DALIImageType.GRAY, adjust_orientation)
    elif any_data:
        # the file's own channels (gray stays 1, alpha is kept); OpenCV ignores the EXIF
        # orientation in this mode, so it is applied here
        img = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
        if img is not None and adjust_orientation:
            img = _orient(img, _exif_orientation(data))
    else:
        flags = cv2.IMREAD_COLOR
        if output_type == DALIImageType.GRAY:
            flags = cv2.IMREAD_GRAYSCALE
        elif output_type not in (DALIImageType.BGR, DALIImageType.YCbCr):
            # libjpeg-turbo (and the PNG, TIFF, ... readers) write RGB themselves: the same
            # bytes as BGR then cvtColor, ~30% less CPU a JPEG (BENCHMARKS.md, "SSD's CPU
            # operators beside DALI's, on the CPU")
            flags = cv2.IMREAD_COLOR_RGB
        if not adjust_orientation:
            flags |= cv2.IMREAD_IGNORE_ORIENTATION
        if dtype != np.uint8:
            flags |= cv2.IMREAD_ANYDEPTH  # keep 16-bit samples for a wider output type
        img = cv2.imdecode(data, flags)
    if img is None:
        raise DecodeError(
            f"decoders.image: cannot decode {data.size} bytes starting {head.hex()}: "
            "corrupt data or an unsupported format"
        )
    if img.dtype != np.uint8 and dtype == np.uint8:  # 16-bit PNG/TIFF: scale to uint8's range
        img = (img.astype(np.float32) * (255.0 / np.iinfo(img.dtype).max) + 0.5).astype(np.uint8)
    if img.ndim == 2:  # GRAY, or a one-channel file with ANY_DATA
        img = img[:, :, None]
    elif any_data:
        if img.shape[2] in (3, 4):
            code = cv2.COLOR_BGR2RGB if img.shape[2] == 3 else cv2.COLOR_BGRA2RGBA
            img = cv2.cvtColor(img, code)
    elif output_type == DALIImageType.YCbCr:
        ycrcb = cv2.cvtColor(img, cv2.COLOR_BGR2YCrCb)
        img = np.ascontiguousarray(ycrcb[:, :, [0, 2, 1]])
    elif output_type != DALIImageType.BGR and frame is not None and frame[2] == 4:
        img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)  # _decode_cmyk_jpeg gives BGR
    return img if img.dtype == dtype else _scale_range(img, dtype)


def _decode_cmyk_jpeg(data: np.ndarray, gray: bool, adjust_orientation: bool) -> np.ndarray:
    """A CMYK or YCCK JPEG as BGR (or 2-D gray, when ``gray``), converted as DALI's CPU
    decoder (nvImageCodec's libjpeg-turbo backend) does: ``R = (255 - C) * (255 - K) / 255``
    rounded down, on the true (not Adobe-inverted) ink values, and gray as
    ``0.299 R + 0.587 G + 0.114 B`` in float32, rounded down.

    OpenCV's own conversion computes ``K - ((255 - C) * K >> 8)`` on the inverted values,
    one or two levels higher than DALI on most pixels (Pillow rounds where DALI rounds
    down: the two agree where K = 0, within one level elsewhere); so libjpeg-turbo decodes to CMYK
    here through Pillow (same library, same IDCT and upsampling as OpenCV's), which also
    undoes the Adobe inversion. The JPEG plugin is used directly: ``Image.open``'s
    decompression-bomb limit is the decoder's ``max_pixels`` check, made before this.
    """
    from io import BytesIO

    from PIL.JpegImagePlugin import JpegImageFile

    with JpegImageFile(BytesIO(data.tobytes())) as im:
        if im.mode != "CMYK":  # a 4-component frame Pillow reads otherwise: unsupported
            raise DecodeError(f"decoders.image: a 4-component JPEG read as {im.mode!r}")
        cmyk = np.asarray(im)
        orientation = 1
        if adjust_orientation:
            try:
                orientation = int(im.getexif().get(0x0112, 1))
            except Exception:  # unreadable EXIF: as if there were none
                orientation = 1
    ink = 255 - cmyk.astype(np.int32)  # 255 - C, 255 - M, 255 - Y, 255 - K
    rgb = ink[:, :, :3] * ink[:, :, 3:] // 255
    if gray:
        f = rgb.astype(np.float32)
        y = np.float32(0.299) * f[:, :, 0] + np.float32(0.587) * f[:, :, 1]
        img = (y + np.float32(0.114) * f[:, :, 2]).astype(np.uint8)
    else:
        img = np.ascontiguousarray(rgb[:, :, ::-1].astype(np.uint8))  # BGR, as OpenCV gives
    return _orient(img, orientation if 1 <= orientation <= 8 else 1)


def as_decode_error(e: Exception, who: str) -> DecodeError:
    """``e`` as a DecodeError: itself, or one naming ``who`` and the original error (OpenCV's
    ``cv2.error``, a MemoryError, ...)."""
    if isinstance(e, DecodeError):
        return e
    return DecodeError(f"{who}: {type(e).__name__}: {str(e).strip() or 'no message'}")


def _exif_orientation(data: np.ndarray) -> int:
    """The EXIF orientation tag (1..8) of an encoded image; 1 when there is none."""
    from io import BytesIO

    from PIL import Image

    try:
        with Image.open(BytesIO(data.tobytes())) as im:
            value = int(im.getexif().get(0x0112, 1))
    except Exception:  # no EXIF, or a format Pillow does not read: nothing to turn
        return 1
    return value if 1 <= value <= 8 else 1


def _orient(img: np.ndarray, orientation: int) -> np.ndarray:
    """The stored picture turned as the EXIF ``orientation`` says it is displayed."""
    if orientation in (5, 6, 7, 8):  # the axes swap
        img = np.swapaxes(img, 0, 1)
        orientation = {5: 1, 6: 2, 7: 3, 8: 4}[orientation]
    if orientation == 2:
        img = img[:, ::-1]
    elif orientation == 3:
        img = img[::-1, ::-1]
    elif orientation == 4:
        img = img[::-1]
    return np.ascontiguousarray(img)


def _check_png_chunks(data: np.ndarray) -> None:
    """Refuse a PNG whose chunks run past the end of the file (truncated, or a length field
    a flipped bit made huge). OpenCV 5 reads such a chunk into a buffer of the claimed
    length first: a 2 KB file claiming a 3.6 GB IDAT took 8 s and gigabytes of memory before
    it failed. Walks the chunk headers only (a few per 100 KB), up to IEND.

    Raises:
        DecodeError: naming the chunk, where it starts and what it claims.
    """
    b = memoryview(data).cast("B")
    pos, n = 8, len(b)
    while pos < n:
        if pos + 8 > n:
            raise DecodeError(f"decoders.image: truncated PNG ({n} bytes, a chunk header cut)")
        length = int.from_bytes(b[pos : pos + 4], "big")
        kind = bytes(b[pos + 4 : pos + 8])
        if pos + 12 + length > n:
            raise DecodeError(
                f"decoders.image: truncated or corrupt PNG: chunk {kind!r} at byte {pos} "
                f"claims {length:,} bytes, {n - pos - 12:,} are left"
            )
        if kind == b"IEND":
            return
        pos += 12 + length


def _scale_range(img: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``img`` (uint8/uint16, or float in [0, 1]) in ``dtype``'s dynamic range."""
    src_max = 1.0 if img.dtype.kind == "f" else float(np.iinfo(img.dtype).max)
    dst_max = 1.0 if dtype.kind == "f" else float(np.iinfo(dtype).max)
    if dtype.kind == "f":
        return (img.astype(np.float64) * (dst_max / src_max)).astype(dtype)
    v = np.rint(img.astype(np.float64) * (dst_max / src_max))
    return np.clip(v, 0, dst_max).astype(dtype)


class _DecoderBase(Operator):
    devices = ("cpu", "mixed")
    # run_batch (mixed) may run for several iterations at once, in the GPU stage's lanes: the
    # parameters come in, and each thread decodes with its own nvImageCodec decoder.
    concurrent_batches = True

    def _setup_decoder(
        self,
        output_type,
        hw_decoder_load,
        hybrid_huffman_threshold,
        device_memory_padding,
        host_memory_padding,
        on_error="raise",
        adjust_orientation=True,
        dtype=None,
        max_pixels=None,
    ) -> None:
        if on_error not in ("raise", "skip"):
            raise ArgumentError(f"{self.schema}: on_error={on_error!r} must be 'raise' or 'skip'")
        self.on_error = on_error
        # None: the pipeline's RuntimeOptions.max_pixels, taken in prepare()
        self._max_pixels_arg = (
            None
            if max_pixels is None
            else check_int(max_pixels, "max_pixels", minimum=1, who=self.schema)
        )
        self.max_pixels = self._max_pixels_arg or RuntimeOptions.max_pixels
        self.adjust_orientation = bool(adjust_orientation)
        self.dtype = parse_dtype(dtype, self.schema, allowed=_DTYPES) or np.dtype(np.uint8)
        if self.device == "mixed" and not self.adjust_orientation:
            raise ArgumentError(
                f"{self.schema}: adjust_orientation=False works with device='cpu' only so far"
            )
        if self.device == "mixed" and self.dtype != np.uint8:
            raise ArgumentError(
                f"{self.schema}: dtype={dtype!r} works with device='cpu' only so far; the "
                "mixed decoder writes UINT8"
            )
        self.output_type = to_image_type(output_type)
        self.hw_decoder_load = float(hw_decoder_load)
        self.hybrid_huffman_threshold = int(hybrid_huffman_threshold)
        self.device_memory_padding = int(device_memory_padding)
        self.host_memory_padding = int(host_memory_padding)
        # mixed: decode in a process per lane (_decode_process.py), unless the pipeline's
        # runtime options say otherwise (prepare)
        self.decode_process = self.device == "mixed" and _decode_process.available()
        self.idle_decode_processes = _decode_process.IDLE_PROCESSES  # kept for the next one
        self._gpu = None

    def prepare(self, ctx) -> None:
        self.decode_process = self.decode_process and ctx.runtime.decode_process
        self.idle_decode_processes = ctx.runtime.idle_decode_processes
        if self._max_pixels_arg is None:
            self.max_pixels = ctx.runtime.max_pixels

    def prepare_gpu(self, ctx) -> None:
        # read by the nvImageCodec decoder when it is made (_nvimgcodec.MixedDecoder)
        self.reuse_outputs = ctx.reuse_outputs
        self.cpu_threads = ctx.cpu_threads
        self.decode_lanes = ctx.lanes  # decode processes to start ahead

    def output_layouts(self, input_layouts):
        return ["HWC"]

    def check_size(self, data: np.ndarray) -> None:
        """Refuse an image whose header claims more than ``max_pixels`` pixels, before any
        memory is taken for it (a decompression bomb: a 1 KB JPEG may claim 60000x60000).

        Raises:
            DecodeError: naming the format and the claimed size.
        """
        claim = claimed_size(data)
        if claim is not None and claim[1] * claim[2] > self.max_pixels:
            raise self.size_error(*claim)

    def size_error(self, fmt: str, height: int, width: int) -> DecodeError:
        """The error for an image whose ``fmt`` header claims ``height`` x ``width`` pixels,
        over ``max_pixels``."""
        return DecodeError(
            f"{self.schema}: the {fmt} header claims {width}x{height} pixels "
            f"({width * height:,}), over max_pixels={self.max_pixels:,}; set max_pixels= "
            "(or RuntimeOptions(max_pixels=...)) higher for images this large"
        )

    def decode(self, data: np.ndarray) -> np.ndarray:
        """``decode_cpu`` after ``check_size``, honouring ``on_error``: whatever the backend
        raises (a corrupt file, OpenCV's own errors such as its size limit, memory) is a
        ``DecodeError`` naming the operator and the reason, or a skipped sample."""
        try:
            self.check_size(data)
            return decode_cpu(
                data, self.output_type, self.adjust_orientation, self.dtype, file_channels=True
            )
        except Exception as e:
            err = as_decode_error(e, self.schema)
            if self.on_error == "skip":
                raise SampleSkipped(str(err)) from e
            if err is e:
                raise
            raise err from e

    def gpu_impl(self):
        """The nvImageCodec implementation (built on first use by the GPU stage)."""
        if self._gpu is None:
            from ._nvimgcodec import MixedDecoder

            with _GPU_INIT:
                if self._gpu is None:
                    self._gpu = MixedDecoder(self)
        return self._gpu

    def run_batch(self, inputs, args, params, stream):
        out, skipped = self.gpu_impl().decode_batch(
            inputs[0], params, stream, skip=self.on_error == "skip"
        )
        return Skipped(out, skipped) if skipped else out

    def close(self) -> None:
        """Hand the mixed decoder's processes back (``Pipeline.close``)."""
        if self._gpu is not None:
            self._gpu.close()


@register(legacy=("ImageDecoder",))
class ImageDecoder(_DecoderBase):
    """Decodes JPEG, PNG, BMP, TIFF, WebP, PNM and JPEG 2000 images to HWC (uint8 by default).

    Args:
        output_type: ``types.RGB`` (default), ``BGR``, ``GRAY``, ``YCbCr`` or ``ANY_DATA``
            (the file's own channels: 1 for a grayscale file, RGBA with alpha; the mixed
            decoder writes RGB for it so far).
        device: ``"cpu"`` or ``"mixed"`` (GPU output; nvJPEG hardware where available).
        adjust_orientation: apply the EXIF orientation (default True; False: CPU only).
        dtype: ``types.UINT8`` (default), ``UINT16`` or ``FLOAT`` (CPU only); values are scaled
            to the type's dynamic range ([0, 1] for FLOAT) from the file's own bit depth.
        hw_decoder_load, hybrid_huffman_threshold, device_memory_padding, host_memory_padding,
        preallocate_width_hint, preallocate_height_hint, affine, use_fast_idct,
        jpeg_fancy_upsampling: accepted as in DALI.
        on_error: ``"raise"`` (default): a corrupt image is an error naming the file.
            ``"skip"`` (DALI cannot do this): the sample is dropped and replaced by another
            sample of the same batch (all its outputs, label included), so batches stay full
            and epochs keep their length; ``pipe.skipped()`` lists what was skipped. Any
            failure counts (corrupt data, an unsupported format, OpenCV's or nvImageCodec's
            own errors, an image over ``max_pixels``). A batch of bad samples only is
            replaced by the next batch of the stream (``executor.py``). On the CPU and on the
            GPU (``"mixed"``) alike.
        max_pixels: (dlpipe extension) the most pixels (height x width) an image's header may
            claim; more is a ``DecodeError`` naming the file and the size (or a skip), decided
            before any memory is taken. Default: the pipeline's
            ``RuntimeOptions.max_pixels``, 2**28.
    """

    process_safe = True  # on the CPU (see Operator): may join a part for the sample processes

    schema = "decoders.image"

    def setup(
        self,
        *,
        output_type=DALIImageType.RGB,
        hw_decoder_load=0.9,
        hybrid_huffman_threshold=1000 * 1000,
        device_memory_padding=16 * 1024 * 1024,
        host_memory_padding=8 * 1024 * 1024,
        device_memory_padding_jpeg2k=0,
        host_memory_padding_jpeg2k=0,
        preallocate_width_hint=0,
        preallocate_height_hint=0,
        affine=True,
        use_fast_idct=False,
        jpeg_fancy_upsampling=False,
        adjust_orientation=True,
        dtype=None,
        on_error="raise",
        max_pixels=None,
        cache_size=0,
        cache_type="",
        memory_stats=False,
        split_stages=False,
        use_chunk_allocator=False,
    ) -> None:
        self._setup_decoder(
            output_type,
            hw_decoder_load,
            hybrid_huffman_threshold,
            device_memory_padding,
            host_memory_padding,
            on_error,
            adjust_orientation,
            dtype,
            max_pixels,
        )

    def run_sample(self, inputs, args, param):
        return self.decode(inputs[0])


@register(legacy=("ImageDecoderRandomCrop",))
class ImageDecoderRandomCrop(_DecoderBase):
    """Decodes a random crop window of each image (the ResNet "random resized crop" window).

    Args:
        random_area: [min, max] share of the image area (default [0.08, 1.0]).
        random_aspect_ratio: [min, max] width/height (default [3/4, 4/3]).
        num_attempts: tries before falling back to the whole (clamped) image (default 10).
        output_type, device, seed, on_error, adjust_orientation, dtype and the decoder hints
            as for ``decoders.image``.
    """

    schema = "decoders.image_random_crop"
    is_random = True

    def setup(
        self,
        *,
        output_type=DALIImageType.RGB,
        random_area: Sequence[float] = (0.08, 1.0),
        random_aspect_ratio: Sequence[float] = (3 / 4, 4 / 3),
        num_attempts: int = 10,
        hw_decoder_load=0.9,
        hybrid_huffman_threshold=1000 * 1000,
        device_memory_padding=16 * 1024 * 1024,
        host_memory_padding=8 * 1024 * 1024,
        preallocate_width_hint=0,
        preallocate_height_hint=0,
        affine=True,
        use_fast_idct=False,
        jpeg_fancy_upsampling=False,
        adjust_orientation=True,
        dtype=None,
        on_error="raise",
        max_pixels=None,
    ) -> None:
        self._setup_decoder(
            output_type,
            hw_decoder_load,
            hybrid_huffman_threshold,
            device_memory_padding,
            host_memory_padding,
            on_error,
            adjust_orientation,
            dtype,
            max_pixels,
        )
        self.window = RandomCropWindow(
            random_area, random_aspect_ratio, num_attempts, who=self.schema
        )

    def batch_params(self, n):
        u = self.window.draw(self.rng, n)
        return Rows(list(u), u)

    def run_sample(self, inputs, args, param):
        img = self.decode(inputs[0])
        y, x, h, w = self.window.window(img.shape[0], img.shape[1], param)
        return np.ascontiguousarray(img[y : y + h, x : x + w])
