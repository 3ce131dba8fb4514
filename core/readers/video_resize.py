"""``fn.readers.video_resize``: DALI's video reader with a resize of every frame.

It is ``fn.readers.video`` followed by ``fn.resize`` on its frames, as DALI's
``VideoReaderResize`` is (``video_reader_resize_op.h``: the reader's sequences go through
``ResizeBase`` with the layout FHWC): the reader node reads and decodes, and a resize node is
added behind it when the graph is defined (``after_call``), with the resize arguments of the
call. Every frame of a sequence is resized with the same geometry; the frames keep the video
dtype; the other outputs (label, frame number, timestamps) are the reader's. Both ``device``
values work: ``"cpu"`` decodes with PyAV and resizes on the CPU, ``"gpu"`` decodes with NVDEC
and resizes every frame of the batch in one kernel launch.
"""

from __future__ import annotations

from ..errors import ArgumentError
from ..graph import DataNode, _call_operator, register
from ._video_index import WHO as VIDEO_WHO
from .video import VideoReader

WHO = "readers.video_resize"

# The arguments that go to the resize node (DALI's ResizeAttr and ResamplingFilterAttr);
# ``dtype`` stays the video reader's (the frames' type, kept by the resize).
RESIZE_ARGS = (
    "resize_x",
    "resize_y",
    "resize_z",
    "size",
    "resize_shorter",
    "resize_longer",
    "mode",
    "max_size",
    "subpixel_scale",
    "roi_start",
    "roi_end",
    "roi_relative",
    "interp_type",
    "min_filter",
    "mag_filter",
    "antialias",
    "temp_buffer_hint",
    "minibatch_size",
)
SIZE_ARGS = ("resize_x", "resize_y", "size", "resize_shorter", "resize_longer")


@register(legacy=("VideoReaderResize",))
class VideoResizeReader(VideoReader):
    """Reads sequences of frames like ``fn.readers.video`` and resizes every frame like
    ``fn.resize``: (F, H', W', C) per sample, layout FHWC.

    Takes every argument of ``fn.readers.video`` (``sequence_length``, ``filenames`` /
    ``file_root`` / ``file_list``, ``step``, ``stride``, ``dtype``, sharding...) and the size and
    filter arguments of ``fn.resize``: give the size as ``resize_x``/``resize_y``, ``size``,
    ``resize_shorter`` or ``resize_longer`` (these and ``roi_start``/``roi_end`` may be
    per-sample argument inputs), with ``mode``, ``max_size``, ``subpixel_scale``, ``roi_*``,
    ``interp_type``, ``min_filter``, ``mag_filter``, ``antialias``. The outputs are the
    reader's, the frames resized.

    Example:
        >>> frames, labels = fn.readers.video_resize(
        ...     device="gpu", file_root="/data/clips", sequence_length=16, resize_x=224,
        ...     resize_y=224, random_shuffle=True, name="Reader")
    """

    schema = "readers.video_resize"
    ops_name = "VideoResize"
    arg_inputs = frozenset(
        {"resize_x", "resize_y", "size", "resize_shorter", "resize_longer", "roi_start", "roi_end"}
    )

    @classmethod
    def accepted_args(cls) -> set[str]:
        return VideoReader.accepted_args() | set(RESIZE_ARGS)

    def setup(self, **kwargs) -> None:
        self.resize_args = {k: kwargs.pop(k) for k in RESIZE_ARGS if k in kwargs}
        try:
            super().setup(**kwargs)
        except ArgumentError as e:
            raise ArgumentError(str(e).replace(f"{VIDEO_WHO}:", f"{WHO}:", 1)) from None

    def after_call(self, outputs: list[DataNode]) -> list[DataNode]:
        node = outputs[0].source
        # Argument inputs of the resize belong to the resize node, not to the reader.
        per_sample = {k: node.arg_nodes.pop(k) for k in list(node.arg_nodes)}
        static = {k: v for k, v in self.resize_args.items() if v is not None}
        if static.get("resize_z") == 0:  # DALI's default: unspecified (2-D)
            del static["resize_z"]
        if not any(k in static or k in per_sample for k in SIZE_ARGS):
            raise ArgumentError(
                f"{WHO}: give the output size: resize_x/resize_y, size, resize_shorter or "
                "resize_longer"
            )
        outs = super().after_call(outputs)
        device = "gpu" if self.decode_device == "gpu" else "cpu"
        try:
            (frames,) = _call_operator(
                "resize", (outs[0],), {**static, **per_sample, "device": device}
            )
        except ArgumentError as e:
            raise ArgumentError(f"{WHO}: {e}") from None
        return [frames, *outs[1:]]
