"""The deprecated operator names DALI 2.4 still accepts, in one table.

Each ``fn.<alias>`` calls the operator ``schema`` (with a ``DeprecationWarning`` naming the
new spelling, as DALI prints one); ``ops.<ClassName>`` is the legacy class of the same
operator. An alias is only made when its operator is registered. Aliases whose operators
dlpipe does not have yet (``fn.coco_reader``, ``fn.image_decoder_slice``, ...) are listed in
``MISSING`` so they are added here with their operators.
"""

from __future__ import annotations

# fn alias -> (registered schema, ops class name)
DEPRECATED = {
    "image_decoder": ("decoders.image", "ImageDecoder"),
    "image_decoder_random_crop": ("decoders.image_random_crop", "ImageDecoderRandomCrop"),
    "image_decoder_crop": ("decoders.image_crop", "ImageDecoderCrop"),
    "image_decoder_slice": ("decoders.image_slice", "ImageDecoderSlice"),
    "audio_decoder": ("decoders.audio", "AudioDecoder"),
    "file_reader": ("readers.file", "FileReader"),
    "caffe_reader": ("readers.caffe", "CaffeReader"),
    "caffe2_reader": ("readers.caffe2", "Caffe2Reader"),
    "coco_reader": ("readers.coco", "COCOReader"),
    "mxnet_reader": ("readers.mxnet", "MXNetReader"),
    "tfrecord_reader": ("readers.tfrecord", "TFRecordReader"),
    "sequence_reader": ("readers.sequence", "SequenceReader"),
    "video_reader": ("readers.video", "VideoReader"),
    "video_reader_resize": ("readers.video_resize", "VideoReaderResize"),
    "numpy_reader": ("readers.numpy", "NumpyReader"),
    "nemo_asr_reader": ("readers.nemo_asr", "NemoAsrReader"),
    "coin_flip": ("random.coin_flip", "CoinFlip"),
    "uniform": ("random.uniform", "Uniform"),
    "normal_distribution": ("random.normal", "NormalDistribution"),
}


def available(registry) -> dict[str, tuple[str, str]]:
    """The aliases whose operators are registered."""
    return {a: v for a, v in DEPRECATED.items() if v[0] in registry}


def missing(registry) -> list[str]:
    """The aliases whose operators are not (yet) in dlpipe."""
    return sorted(a for a, v in DEPRECATED.items() if v[0] not in registry)
