"""``fn.readers.video``: sequences of frames from video files, DALI's video reader.

Samples are *sequences*: for every file, sequence starts s = start, start+step, ... while
``s + (sequence_length-1)*stride + 1 <= end``, and sharding, shuffling and padding apply to the
list of all sequences of all files (``_sharding.ShardedLoader``), as DALI's VideoLoader does.
Every file is indexed once when the reader is built (``_video_index.py``: a packet scan, no
decoding), so the sequence list and ``reader_meta`` are known up front.

``device="cpu"`` decodes with PyAV (FFmpeg) on the worker threads. ``device="gpu"`` decodes on
the GPU's hardware decoders (NVDEC) through PyNvVideoCodec: the reader then draws the sequences
on the CPU stage and a mixed operator (``_video_decode_gpu``, ``_video_gpu.py``) decodes the
batch straight into device memory, so checkpoints, ``reader_meta`` and error messages work the
same on both devices.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError, DataNotFoundError
from ..graph import Operator, _call_operator, register
from ..types import DALIDataType, DALIImageType, to_dali_dtype, to_image_type
from ._sharding import ListSharding, ShardedReader
from ._video_index import (
    WHO,
    CpuSequenceDecoder,
    VideoInfo,
    frame_range,
    import_av,
    index_videos,
    list_video_root,
    parse_video_file_list,
    sequence_starts,
)


def _positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ArgumentError(f"{WHO}: {name}={value!r} must be an integer >= {minimum}")
    return int(value)


@register(legacy=("VideoReader",))
class VideoReader(ShardedReader, Operator):
    """Reads sequences of ``sequence_length`` frames, (F, H, W, C) per sample.

    Give the videos in exactly one way: ``filenames`` (+ optional ``labels``), ``file_root``
    (each immediate subdirectory, sorted, is a class) or ``file_list`` (lines of
    ``file label [start [end]]``; start/end in seconds, or frame numbers with
    ``file_list_frame_num=True``; a negative value counts from the end, a missing or 0 end
    means the end of the video; relative paths are relative to the list's directory).

    Outputs, in order: the frames; the label (int32, shape (1,)) when ``labels`` is given (an
    empty list means 0-based file indices), with ``file_root`` and with ``file_list``; the
    index of the sequence's first frame (int32, (1,)) with ``enable_frame_num``; the timestamp
    of every frame in seconds (float32, (F,)) with ``enable_timestamps``. With
    ``device="gpu"`` every output is on the GPU.

    Args:
        sequence_length: frames per sequence (required).
        step: frames between the starts of consecutive sequences; -1 (default) means
            ``sequence_length``.
        stride: frames between consecutive frames of a sequence (default 1).
        pad_sequences: also make the sequences that run past the end (default False); the
            missing frames are zero and their frame numbers/timestamps -1.
        image_type: ``types.RGB`` (default) or ``types.YCbCr`` (the stream's own Y, Cb, Cr
            samples, chroma upsampled).
        dtype: ``types.UINT8`` (default) or ``types.FLOAT``.
        normalized: values divided by 255 (float32 output, also with the default dtype, as
            DALI's older ``normalized`` did). Default False.
        channels: 3 (the only value supported).
        skip_vfr_check: read variable-frame-rate videos anyway (default False: an error
            naming the file).
        random_shuffle, initial_fill, shard_id, num_shards, stick_to_shard, pad_last_batch:
            as in every DALI reader, over the list of sequences.
        num_decoders: dlpipe extension, ``device="gpu"`` only: hardware decoder sessions
            working on a batch at once (default 8; a GPU has several NVDEC engines).
        additional_decode_surfaces, dont_use_mmap, lazy_init, prefetch_queue_depth, read_ahead,
        skip_cached_images, tensor_init_bytes, file_list_include_preceding_frame: accepted as
            in DALI.

    Example:
        >>> frames, labels = fn.readers.video(device="gpu", file_root="/data/clips",
        ...                                   sequence_length=16, random_shuffle=True,
        ...                                   name="Reader")
    """

    schema = "readers.video"
    devices = ("cpu", "gpu")
    num_inputs = (0, 0)
    num_outputs = 1
    is_random = True
    is_reader = True

    def setup(
        self,
        *,
        sequence_length: int | None = None,
        filenames: Sequence[str] | str | None = None,
        file_root: str | None = None,
        file_list: str | None = None,
        labels: Sequence[int] | None = None,
        step: int = -1,
        stride: int = 1,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        shard_id: int = 0,
        num_shards: int = 1,
        stick_to_shard: bool = False,
        pad_last_batch: bool = False,
        image_type=DALIImageType.RGB,
        dtype=DALIDataType.UINT8,
        normalized: bool = False,
        channels: int = 3,
        enable_frame_num: bool = False,
        enable_timestamps: bool = False,
        pad_sequences: bool = False,
        file_list_frame_num: bool = False,
        file_list_include_preceding_frame: bool = False,
        skip_vfr_check: bool = False,
        num_decoders: int = 8,
        additional_decode_surfaces: int = 2,
        dont_use_mmap: bool = False,
        lazy_init: bool = False,
        prefetch_queue_depth: int = 1,
        read_ahead: bool = False,
        skip_cached_images: bool = False,
        tensor_init_bytes: int = 1048576,
    ) -> None:
        if sequence_length is None:
            raise ArgumentError(f"{WHO}: sequence_length is required")
        self.sequence_length = _positive_int(sequence_length, "sequence_length")
        self.stride = _positive_int(stride, "stride")
        if step == -1:
            step = self.sequence_length
        self.step = _positive_int(step, "step")
        if channels != 3:
            raise ArgumentError(f"{WHO}: channels={channels!r} is not supported; only 3")
        kind = to_image_type(image_type)
        if kind not in (DALIImageType.RGB, DALIImageType.YCbCr):
            raise ArgumentError(
                f"{WHO}: image_type={image_type!r} is not supported; use types.RGB or types.YCbCr"
            )
        self.image_type = "YCbCr" if kind == DALIImageType.YCbCr else "RGB"
        try:
            out_dtype = to_dali_dtype(dtype)
        except (KeyError, TypeError, ValueError):
            out_dtype = None
        if out_dtype not in (DALIDataType.UINT8, DALIDataType.FLOAT):
            raise ArgumentError(f"{WHO}: dtype={dtype!r} must be types.UINT8 or types.FLOAT")
        self.normalized = bool(normalized)
        self.out_dtype = np.dtype(
            np.float32 if out_dtype == DALIDataType.FLOAT or self.normalized else np.uint8
        )
        self.enable_frame_num = bool(enable_frame_num)
        self.enable_timestamps = bool(enable_timestamps)
        self.pad_sequences = bool(pad_sequences)
        self.num_decoders = _positive_int(num_decoders, "num_decoders")
        import_av()  # MissingExtraError naming the "video" extra, at build time

        given = [x is not None for x in (filenames, file_root, file_list)]
        if sum(given) != 1:
            raise ArgumentError(f"{WHO}: give exactly one of filenames=, file_root=, file_list=")
        if labels is not None and filenames is None:
            raise ArgumentError(f"{WHO}: labels= needs filenames=")
        ranges: list[tuple | None]
        if filenames is not None:
            paths = [filenames] if isinstance(filenames, str) else list(filenames)
            if not paths:
                raise ArgumentError(f"{WHO}: filenames= is empty")
            if labels is None:
                label_list = None
            else:
                label_list = list(labels) if len(labels) else list(range(len(paths)))
                if len(label_list) != len(paths):
                    raise ArgumentError(
                        f"{WHO}: labels has {len(label_list)} entries but filenames has "
                        f"{len(paths)}"
                    )
            ranges = [None] * len(paths)
        elif file_root is not None:
            paths, label_list = list_video_root(file_root)
            if not paths:
                raise DataNotFoundError(f"{WHO}: no video files found in file_root={file_root!r}")
            ranges = [None] * len(paths)
        else:
            entries = parse_video_file_list(file_list)
            if not entries:
                raise DataNotFoundError(f"{WHO}: file_list={file_list!r} lists no videos")
            paths = [e.path for e in entries]
            label_list = [e.label for e in entries]
            ranges = entries
        if label_list is not None and any(int(v) < 0 for v in label_list):
            raise ArgumentError(f"{WHO}: labels must be non-negative, got {label_list}")

        self.files = paths
        self.labels = None if label_list is None else np.asarray(label_list, np.int32)
        distinct = sorted(set(paths))
        infos = dict(zip(distinct, index_videos(distinct, bool(skip_vfr_check)), strict=True))
        self.videos: list[VideoInfo] = [infos[p] for p in paths]

        seq_file, seq_start, seq_end = [], [], []
        for f, (info, entry) in enumerate(zip(self.videos, ranges, strict=True)):
            if entry is None:
                lo, hi = 0, info.num_frames
            else:
                lo, hi = frame_range(entry, info, bool(file_list_frame_num))
            starts = sequence_starts(
                lo, hi, self.sequence_length, self.step, self.stride, self.pad_sequences
            )
            seq_file.append(np.full(len(starts), f, np.int32))
            seq_start.append(starts)
            seq_end.append(np.full(len(starts), hi, np.int64))
        self.seq_file = np.concatenate(seq_file)
        self.seq_start = np.concatenate(seq_start)
        self.seq_end = np.concatenate(seq_end)
        if len(self.seq_file) == 0:
            longest = max(v.num_frames for v in self.videos)
            raise ArgumentError(
                f"{WHO}: no sequence fits: sequence_length={self.sequence_length} with "
                f"stride={self.stride} needs {(self.sequence_length - 1) * self.stride + 1} "
                f"frames, the longest video has {longest}"
            )

        self.num_outputs = 1 + (self.labels is not None) + self.enable_frame_num
        self.num_outputs += self.enable_timestamps
        # random_shuffle: one fixed-seed shuffle of the sequence list, the same for every shard.
        self.loader = ListSharding(
            len(self.seq_file),
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=bool(random_shuffle),
            initial_fill=initial_fill,
            stick_to_shard=bool(stick_to_shard),
            pad_last_batch=bool(pad_last_batch),
            who=f"{WHO} {self.name or ''}".strip(),
        )
        # device="gpu": this node only draws the sequences (CPU stage); a mixed operator
        # added by after_call() decodes them on the GPU.
        self.decode_device = self.device
        self.device = "cpu"
        self._cpu = None if self.decode_device == "gpu" else CpuSequenceDecoder(self.image_type)

    # --- graph ------------------------------------------------------------------------------
    def output_devices(self) -> list[str]:
        return ["cpu"] * (1 if self.decode_device == "gpu" else self.num_outputs)

    def output_layouts(self, input_layouts):
        if self.decode_device == "gpu":
            return [""]
        return self.layouts()

    def layouts(self) -> list[str]:
        return ["FHWC"] + [""] * (self.num_outputs - 1)

    def after_call(self, outputs):
        if self.decode_device != "gpu":
            return outputs
        from . import _video_gpu  # noqa: F401  (registers "_video_decode_gpu")

        return _call_operator(
            "_video_decode_gpu", (outputs[0],), {"device": "mixed", "reader": self}
        )

    # --- the reader ---------------------------------------------------------------------------

    def close(self) -> None:
        if self._cpu is not None:
            self._cpu.close()

    def source_info(self, param: int) -> str:
        return self.files[int(self.seq_file[param])]

    def sequence_frames(self, seq: int) -> np.ndarray:
        """Frame indices of sequence ``seq``; -1 marks padding past the end."""
        start, end = int(self.seq_start[seq]), int(self.seq_end[seq])
        frames = start + self.stride * np.arange(self.sequence_length, dtype=np.int64)
        frames[frames >= end] = -1
        return frames

    def extra_outputs(self, seq: int, frames: np.ndarray) -> list[np.ndarray]:
        """Label, frame number and timestamps of sequence ``seq`` (those enabled), on the host."""
        f = int(self.seq_file[seq])
        out = []
        if self.labels is not None:
            out.append(self.labels[f : f + 1].copy())
        if self.enable_frame_num:
            out.append(np.array([frames[0]], np.int32))
        if self.enable_timestamps:
            out.append(self.videos[f].timestamps(frames))
        return out

    def run_sample(self, inputs, args, param):
        if self.decode_device == "gpu":
            return np.array([param], np.int64)
        seq = int(param)
        info = self.videos[int(self.seq_file[seq])]
        frames = self.sequence_frames(seq)
        valid = frames[frames >= 0]
        video = np.zeros((len(frames), info.height, info.width, 3), np.uint8)
        self._cpu.decode(info, valid, video)
        if self.out_dtype != np.uint8:
            video = video.astype(np.float32)
            if self.normalized:
                video *= np.float32(1.0 / 255.0)
        outs = [video, *self.extra_outputs(seq, frames)]
        return outs[0] if len(outs) == 1 else tuple(outs)
