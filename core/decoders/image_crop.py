"""``fn.decoders.image_crop``: decode, then a fixed window at a (per-sample) position.

CPU: OpenCV decodes the whole image (it has no region decode) and the window is cut out of it.
Mixed: nvImageCodec decodes the image and the window is a view of it (no copy), as for
``decoders.image_random_crop``; with the mixed decoder's ``roi_decode`` only the window is
decoded (nvImageCodec's ``Region``), JPEGs with EXIF data excepted. The window comes from the
decoded, EXIF-oriented size, and must lie inside the image (DALI's decoders neither pad nor
trim).
"""

from __future__ import annotations

import numpy as np

from ..graph import Skipped, register
from ..types import DALIImageType
from ._windows import CropSpec, DecodeWindow
from .image import _DecoderBase


@register(legacy=("ImageDecoderCrop",))
class ImageDecoderCrop(CropSpec, _DecoderBase):
    """Decodes images and crops a fixed window from each (DALI's ``decoders.image_crop``).

    Args:
        crop: the window size (H, W) (a third, leading value, D, is ignored for images).
            Or else ``crop_h`` and ``crop_w`` (given together). Without any, the whole image.
        crop_h, crop_w: window height and width; per-sample argument inputs allowed.
        crop_pos_x, crop_pos_y: normalized window position in [0, 1] (default 0.5, centred);
            per-sample argument inputs allowed. The anchor is ``round(pos * (in - crop))``.
        output_type, device, dtype, adjust_orientation, on_error, max_pixels and the decoder
            hints as for
            ``decoders.image``.

    Raises:
        ArgumentError: a window that does not fit the image (at run time, naming both).

    Example:
        >>> images = fn.decoders.image_crop(jpegs, device="mixed", crop=(224, 224),
        ...                                 crop_pos_x=fn.random.uniform(range=(0, 1)))
    """

    process_safe = True  # on the CPU (see Operator): may join a part for the sample processes

    schema = "decoders.image_crop"
    arg_inputs = CropSpec.CROP_ARG_INPUTS

    def setup(
        self,
        *,
        crop=None,
        crop_h=None,
        crop_w=None,
        crop_d=None,
        crop_pos_x=0.5,
        crop_pos_y=0.5,
        crop_pos_z=0.5,
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
        self.setup_crop(
            self.schema, crop, crop_h, crop_w, crop_d, crop_pos_x, crop_pos_y, crop_pos_z,
            "error", 0,
        )  # fmt: skip
        self.window = DecodeWindow(self.resolve, self.schema)

    def run_sample(self, inputs, args, param):
        img = self.decode(inputs[0])
        y, x, h, w = self.window.window(img.shape[0], img.shape[1], self.spec(args))
        return np.ascontiguousarray(img[y : y + h, x : x + w])

    def run_batch(self, inputs, args, params, stream):
        n = len(inputs[0])
        specs = [self.spec({k: v[i] for k, v in args.items()}) for i in range(n)]
        out, skipped = self.gpu_impl().decode_batch(
            inputs[0], specs, stream, skip=self.on_error == "skip"
        )
        return Skipped(out, skipped) if skipped else out


@register
class _ImageDecoderCropAlias(ImageDecoderCrop):
    """The deprecated ``fn.image_decoder_crop`` (DALI < 1.0's name)."""

    schema = "image_decoder_crop"
