"""``fn.decoders.image_slice``: decode, then a window given as a slice (DALI's SliceAttr).

The window is given by named arguments (``start``/``rel_start`` with ``end``/``rel_end``/
``shape``/``rel_shape``, per-sample argument inputs allowed) or by two positional inputs,
anchor and shape (normalized when float and ``normalized_anchor``/``normalized_shape``, the
default), over ``axis_names`` (default ``"WH"``: x first) or ``axes`` of the decoded image.
CPU: the whole image is decoded (OpenCV has no region decode) and the window cut out. Mixed: a
view of the decoded image, or with ``roi_decode`` only the window decoded, as for
``decoders.image_crop``. The window must lie inside the image.
"""

from __future__ import annotations

import numpy as np

from ..graph import Skipped, register
from ..types import DALIImageType
from ._windows import DecodeWindow, SliceSpec
from .image import _DecoderBase


@register(legacy=("ImageDecoderSlice",))
class ImageDecoderSlice(SliceSpec, _DecoderBase):
    """Decodes images and extracts a slice of each (DALI's ``decoders.image_slice``).

    Args:
        anchor, shape (positional inputs 1 and 2): the slice's start and extent, one value per
            sliced axis; float values are fractions of the extent when ``normalized_anchor``/
            ``normalized_shape`` (default True), integers are absolute.
        start, rel_start, end, rel_end, shape, rel_shape: named alternative (start or
            rel_start, with one of the others); per-sample argument inputs allowed.
        axis_names: the order of the values, by layout letter (default ``"WH"``).
        axes: the order of the values, by axis index of the (H, W) image; not with
            ``axis_names``.
        output_type, device, dtype, adjust_orientation, on_error, max_pixels and the decoder
            hints as for
            ``decoders.image``.

    Raises:
        ArgumentError: conflicting arguments, a wrong number of values, or a window that does
            not fit the image.

    Example:
        >>> crop_begin, crop_size, boxes, labels = fn.random_bbox_crop(boxes, labels)
        >>> images = fn.decoders.image_slice(jpegs, crop_begin, crop_size, device="mixed")
    """

    process_safe = True  # on the CPU (see Operator): may join a part for the sample processes

    schema = "decoders.image_slice"
    num_inputs = (1, 3)
    arg_inputs = frozenset(SliceSpec.NAMED)

    def setup(
        self,
        *,
        start=None,
        rel_start=None,
        end=None,
        rel_end=None,
        shape=None,
        rel_shape=None,
        axes=None,
        axis_names=None,
        normalized_anchor=True,
        normalized_shape=True,
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
        named = {
            "start": start,
            "rel_start": rel_start,
            "end": end,
            "rel_end": rel_end,
            "shape": shape,
            "rel_shape": rel_shape,
        }
        self.setup_slice(self.schema, named, axes, axis_names, normalized_anchor, normalized_shape)
        self.window = DecodeWindow(self.resolve, self.schema)

    def run_sample(self, inputs, args, param):
        img = self.decode(inputs[0])
        spec = self.spec(args, inputs[1:])
        y, x, h, w = self.window.window(img.shape[0], img.shape[1], spec)
        return np.ascontiguousarray(img[y : y + h, x : x + w])

    def run_batch(self, inputs, args, params, stream):
        n = len(inputs[0])
        specs = [
            self.spec({k: v[i] for k, v in args.items()}, [x[i] for x in inputs[1:]])
            for i in range(n)
        ]
        out, skipped = self.gpu_impl().decode_batch(
            inputs[0], specs, stream, skip=self.on_error == "skip"
        )
        return Skipped(out, skipped) if skipped else out


@register
class _ImageDecoderSliceAlias(ImageDecoderSlice):
    """The deprecated ``fn.image_decoder_slice`` (DALI < 1.0's name)."""

    schema = "image_decoder_slice"
