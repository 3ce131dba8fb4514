"""The mixed (GPU) image decoder: nvImageCodec with nvJPEG's hardware engines and the hybrid
CPU+GPU backend.

One ``decode`` call per batch. The hardware JPEG engines (A100, H100, ...) take the share
``hw_decoder_load`` of the batch; the hybrid backend (Huffman on the CPU, IDCT on the GPU) and
the full-GPU CUDA backend take the rest and whatever the hardware cannot decode (progressive
JPEG, for one). Samples that no GPU backend decodes (PNG, BMP, TIFF, WebP, ...) are decoded on the
CPU with :func:`~dlpipe.decoders.image.decode_cpu` and uploaded, inside the same batch; a sample
that does not decode anywhere raises :class:`DecodeError` carrying ``sample_index``, which the
executor turns into a message naming the file.

``decoders.image_random_crop`` computes each crop window from the image size in the header and
decodes only that region (nvImageCodec's ROI decode); a JPEG with EXIF data (whose orientation
may swap the axes) is decoded whole and cropped afterwards.

Decoded pixels stay in the images nvImageCodec allocated on the pipeline's stream; the batch's
arrays keep them alive, and they are released in stream order once nothing refers to them.
"""

from __future__ import annotations

import numpy as np

from ..errors import DecodeError, require_extra
from ..types import DALIImageType
from .image import decode_cpu

_JPEG = b"\xff\xd8"


def _has_exif(head: bytes) -> bool:
    return b"Exif\x00" in head


def _truncated_jpeg(data: np.ndarray) -> bool:
    return bytes(data[:2]) == _JPEG and bytes(data[-1024:]).rfind(b"\xff\xd9") < 0


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
        self.roi_decode = True
        self.device_id = self.cupy.cuda.runtime.getDevice()
        load = min(max(float(op.hw_decoder_load), 0.0), 1.0)
        backends = []
        if load > 0:
            backends.append(nvi.Backend(nvi.BackendKind.HW_GPU_ONLY, load_hint=load))
        backends += [
            nvi.Backend(nvi.BackendKind.HYBRID_CPU_GPU, load_hint=1.0),
            nvi.Backend(nvi.BackendKind.GPU_ONLY, load_hint=1.0),
        ]
        options = f"nvjpeg_cuda_decoder:hybrid_huffman_threshold={int(op.hybrid_huffman_threshold)}"
        try:
            self.decoder = nvi.Decoder(device_id=self.device_id, backends=backends, options=options)
        except Exception:  # an nvImageCodec without that option
            self.decoder = nvi.Decoder(device_id=self.device_id, backends=backends)
        self.gpu_output = self.output_type in (
            DALIImageType.RGB,
            DALIImageType.BGR,
            DALIImageType.GRAY,
            DALIImageType.ANY_DATA,
        )
        if self.output_type == DALIImageType.GRAY:
            self.params = nvi.DecodeParams(
                apply_exif_orientation=True,
                color_spec=nvi.ColorSpec.GRAY,
                sample_format=nvi.SampleFormat.I_Y,
            )
        elif self.output_type == DALIImageType.BGR:
            self.params = nvi.DecodeParams(
                apply_exif_orientation=True,
                color_spec=nvi.ColorSpec.SRGB,
                sample_format=nvi.SampleFormat.I_BGR,
            )
        else:
            self.params = nvi.DecodeParams(
                apply_exif_orientation=True,
                color_spec=nvi.ColorSpec.SRGB,
                sample_format=nvi.SampleFormat.I_RGB,
            )

    def decode_batch(self, samples, params, stream):
        """Decode a batch of encoded samples (1-D uint8 numpy arrays) into a SampleList."""
        from ..tensors_gpu import SampleList

        nvi = self.nvimgcodec
        n = len(samples)
        out: list = [None] * n
        streams, where, crops = [], [], {}
        cpu: list[int] = []
        for i, data in enumerate(samples):
            if data.size == 0 or not self.gpu_output:
                cpu.append(i)
                continue
            if _truncated_jpeg(data):
                e = DecodeError(
                    f"decoders.image: truncated JPEG ({data.size} bytes, no end-of-image marker)"
                )
                e.sample_index = i
                raise e
            try:
                cs = nvi.CodeStream(data)
            except Exception:
                cpu.append(i)
                continue
            if self.window is not None:
                if self.roi_decode and not _has_exif(bytes(data[:256])):
                    y, x, h, w = self.window.window(cs.height, cs.width, params[i])
                    cs = cs.get_sub_code_stream(region=nvi.Region(y, x, y + h, x + w))
                else:
                    crops[i] = True
            streams.append(cs)
            where.append(i)
        if streams:
            images = self.decoder.decode(streams, params=self.params, cuda_stream=stream.ptr)
            for i, img in zip(where, images, strict=True):
                if img is None:
                    cpu.append(i)
                elif i in crops:
                    arr = self.cupy.asarray(img)
                    y, x, h, w = self.window.window(arr.shape[0], arr.shape[1], params[i])
                    out[i] = arr[y : y + h, x : x + w]
                else:
                    out[i] = img
        for i in sorted(cpu):
            try:
                img = decode_cpu(samples[i], self.output_type)
            except DecodeError as e:
                e.sample_index = i
                raise
            if self.window is not None:
                y, x, h, w = self.window.window(img.shape[0], img.shape[1], params[i])
                img = np.ascontiguousarray(img[y : y + h, x : x + w])
            out[i] = self.cupy.asarray(img)  # on the current (pipeline) stream
        return SampleList.from_arrays(out, self.device_id)
