"""Video indexing and CPU sequence decoding with PyAV (FFmpeg), for ``fn.readers.video``.

A video is indexed once, when the reader is built: one pass over its packets (no decoding)
gives the presentation timestamps of every frame, which frames are keyframes, and the frame
rate. Frame ``i`` is the ``i``-th frame in presentation order. Decoding a sequence seeks to
the last keyframe at or before its first frame and decodes forward; an open container is kept
per worker thread, so the next sequence of the same file continues where the last one stopped
when that is cheaper than seeking.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ..errors import ArgumentError, DataNotFoundError, DecodeError, require_extra

WHO = "readers.video"


def import_av():
    """PyAV, or :class:`MissingExtraError` naming the ``video`` extra."""
    return require_extra("av", "video")


@dataclass
class VideoInfo:
    """What the reader needs to know about one video file.

    Attributes:
        path: the file.
        num_frames: frames in presentation order.
        pts: int64 (num_frames,) presentation timestamps, ascending, in ``time_base`` units.
        keyframes: int64 sorted indices of the frames that are keyframes (frame 0 included).
        time_base: seconds per ``pts`` unit.
        fps: frames per second (constant frame rate).
        width, height: frame size.
        codec: the codec name (``h264``, ``hevc``, ...).
    """

    path: str
    num_frames: int
    pts: np.ndarray
    keyframes: np.ndarray
    time_base: Fraction
    fps: float
    width: int
    height: int
    codec: str
    index_of_pts: dict = field(default_factory=dict, repr=False)

    def keyframe_before(self, frame: int) -> int:
        """The last keyframe at or before ``frame``."""
        k = int(np.searchsorted(self.keyframes, frame, side="right")) - 1
        return int(self.keyframes[max(k, 0)])

    def timestamps(self, frames: np.ndarray) -> np.ndarray:
        """Seconds (float32) of the given frame indices; -1 for indices < 0."""
        out = np.full(len(frames), -1.0, np.float32)
        ok = frames >= 0
        out[ok] = self.pts[frames[ok]] * float(self.time_base)
        return out


def index_video(path: str, skip_vfr_check: bool = False) -> VideoInfo:
    """Index one video by scanning its packets (no decoding).

    Raises:
        DataNotFoundError: the file does not exist.
        DecodeError: not a video FFmpeg can read, no video stream, no timestamps, no frames,
            or a variable frame rate (unless ``skip_vfr_check``).
    """
    av = import_av()
    if not os.path.isfile(path):
        raise DataNotFoundError(f"{WHO}: video file {path!r} does not exist")
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise DecodeError(f"{WHO}: {path!r} has no video stream")
            stream = container.streams.video[0]
            time_base = stream.time_base
            ctx = stream.codec_context
            width, height, codec = ctx.width, ctx.height, ctx.name
            rate = stream.average_rate or stream.base_rate or stream.guessed_rate
            pts_list: list[int] = []
            key_list: list[bool] = []
            for packet in container.demux(stream):
                if packet.size == 0:  # the demuxer's final flush packet
                    continue
                if packet.pts is None:
                    raise DecodeError(
                        f"{WHO}: {path!r} has packets without timestamps (a raw elementary "
                        "stream?); put the video in a container such as MP4 or MKV"
                    )
                pts_list.append(int(packet.pts))
                key_list.append(bool(packet.is_keyframe))
    except DecodeError:
        raise
    except Exception as e:  # av.error.* (InvalidDataError, ...) and OSError
        raise DecodeError(f"{WHO}: cannot read video {path!r}: {e}") from e
    if not pts_list:
        raise DecodeError(f"{WHO}: {path!r} has no video frames")
    raw = np.asarray(pts_list, np.int64)
    order = np.argsort(raw, kind="stable")
    pts = raw[order]
    if len(np.unique(pts)) != len(pts):
        raise DecodeError(f"{WHO}: {path!r} has frames with duplicate timestamps")
    keys = np.flatnonzero(np.asarray(key_list, bool)[order]).astype(np.int64)
    if len(keys) == 0 or keys[0] != 0:
        keys = np.concatenate([[0], keys]).astype(np.int64)
    tb = Fraction(time_base.numerator, time_base.denominator) if time_base else Fraction(1, 1)
    if len(pts) > 1:
        diffs = np.diff(pts)
        median = float(np.median(diffs))
        if not skip_vfr_check and np.abs(diffs - median).max() > max(1.0, 0.01 * median):
            raise DecodeError(
                f"{WHO}: {path!r} has a variable frame rate (frame durations from "
                f"{int(diffs.min())} to {int(diffs.max())} x {tb} s); only constant frame rate "
                "videos are supported (skip_vfr_check=True reads it anyway)"
            )
        fps = 1.0 / (median * float(tb))
    else:
        fps = float(rate) if rate else 1.0
    return VideoInfo(
        path=path,
        num_frames=len(pts),
        pts=pts,
        keyframes=keys,
        time_base=tb,
        fps=fps,
        width=int(width),
        height=int(height),
        codec=str(codec),
        index_of_pts={int(p): i for i, p in enumerate(pts)},
    )


def index_videos(paths: Sequence[str], skip_vfr_check: bool) -> list[VideoInfo]:
    """Index many videos on a few threads (packet scanning is mostly I/O)."""
    if len(paths) <= 1:
        return [index_video(p, skip_vfr_check) for p in paths]
    with ThreadPoolExecutor(min(8, len(paths))) as pool:
        return list(pool.map(lambda p: index_video(p, skip_vfr_check), paths))


# --- listing ------------------------------------------------------------------------------------


def list_video_root(root: str) -> tuple[list[str], list[int]]:
    """``file_root``: each immediate subdirectory (sorted) is a class; every regular file in it
    (sorted, hidden files excluded) is a video of that class."""
    if not os.path.isdir(root):
        raise DataNotFoundError(f"{WHO}: file_root={root!r} is not a directory")
    with os.scandir(root) as it:
        subdirs = sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))
    files: list[str] = []
    labels: list[int] = []
    for label, sub in enumerate(subdirs):
        with os.scandir(os.path.join(root, sub)) as it:
            names = sorted(e.name for e in it if e.is_file() and not e.name.startswith("."))
        files += [os.path.join(root, sub, n) for n in names]
        labels += [label] * len(names)
    return files, labels


@dataclass
class ListEntry:
    path: str
    label: int
    start: float | None
    end: float | None
    where: str  # "list.txt:3", for messages


def parse_video_file_list(path: str) -> list[ListEntry]:
    """``file_list``: lines of ``file label [start [end]]``; relative paths are relative to the
    list's directory. Numbers may be negative (counted from the end)."""
    if not os.path.isfile(path):
        raise DataNotFoundError(f"{WHO}: file_list={path!r} does not exist")
    base = os.path.dirname(path)
    entries = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            where = f"{path}:{lineno}"
            if not 2 <= len(parts) <= 4:
                raise ArgumentError(
                    f"{WHO}: {where}: expected 'file label [start [end]]', got {line.rstrip()!r}"
                )
            try:
                label = int(parts[1])
                nums = [float(x) for x in parts[2:]]
            except ValueError:
                raise ArgumentError(
                    f"{WHO}: {where}: expected an integer label and numeric start/end, got "
                    f"{line.rstrip()!r}"
                ) from None
            if label < 0:
                raise ArgumentError(f"{WHO}: {where}: label={label} must be non-negative")
            name = parts[0] if os.path.isabs(parts[0]) else os.path.join(base, parts[0])
            start = nums[0] if nums else None
            end = nums[1] if len(nums) > 1 else None
            entries.append(ListEntry(name, label, start, end, where))
    return entries


def frame_range(entry: ListEntry, info: VideoInfo, frame_num: bool) -> tuple[int, int]:
    """The [start, end) frame range of a file-list entry.

    Frame numbers (``file_list_frame_num``) or seconds: a negative value counts from the end,
    a missing or zero end means the end of the video. Second ``t`` maps to the first frame
    whose time since the video's first frame is >= ``t``.
    """
    n = info.num_frames

    def to_frame(v: float) -> int:
        if frame_num:
            f = int(v)
            return n + f if f < 0 else f
        seconds = info.num_frames / info.fps + v if v < 0 else v
        return math.ceil(seconds * info.fps - 1e-6)

    start = 0 if entry.start is None else to_frame(entry.start)
    end = n if entry.end is None or entry.end == 0 else to_frame(entry.end)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if start >= end:
        raise ArgumentError(
            f"{WHO}: {entry.where}: start={entry.start} end={entry.end} leave no frames of "
            f"{entry.path!r} ({n} frames)"
        )
    return start, end


def sequence_starts(
    start: int, end: int, length: int, step: int, stride: int, pad: bool
) -> np.ndarray:
    """DALI's sequence starts in [start, end): s = start, start+step, ... while the whole
    sequence fits (s + (length-1)*stride + 1 <= end), or while s < end with ``pad``."""
    last = end - 1 if pad else end - ((length - 1) * stride + 1)
    if last < start:
        return np.zeros(0, np.int64)
    return np.arange(start, last + 1, step, dtype=np.int64)


# --- CPU decoding -------------------------------------------------------------------------------


class _Open:
    """An open container of one video and where its decoder stands."""

    def __init__(self, av, path: str):
        self.container = av.open(path)
        self.stream = self.container.streams.video[0]
        self.frames = None  # the decode generator, positioned after ``next_index - 1``
        self.next_index: int | None = None

    def close(self) -> None:
        self.frames = None
        try:
            self.container.close()
        except Exception:  # pragma: no cover - closing a broken container
            pass


class CpuSequenceDecoder:
    """Decodes frame sequences with PyAV, one small cache of open containers per thread.

    Args:
        image_type: "RGB" (``rgb24``) or "YCbCr" (the stream's own Y, Cb, Cr samples, chroma
            upsampled by FFmpeg's scaler: ``yuv444p``).
        cache_size: open containers kept per worker thread.
    """

    def __init__(self, image_type: str = "RGB", cache_size: int = 2):
        self.av = import_av()
        self.image_type = image_type
        self.cache_size = cache_size
        self._local = threading.local()
        self._caches: list[OrderedDict] = []  # every thread's, so close() reaches them all
        self._lock = threading.Lock()

    def _cache(self) -> OrderedDict:
        cache = getattr(self._local, "cache", None)
        if cache is None:
            cache = self._local.cache = OrderedDict()
            with self._lock:
                self._caches.append(cache)
        return cache

    def close(self) -> None:
        """Close every thread's open containers now. Left to the garbage collector, FFmpeg's
        objects may be freed in a process forked later (a DataLoader worker), where freeing
        them waits forever on threads that the fork did not copy."""
        with self._lock:
            caches, self._caches = self._caches, []
        for cache in caches:
            while cache:
                cache.popitem()[1].close()
        self._local = threading.local()

    def _open(self, info: VideoInfo) -> _Open:
        cache = self._cache()
        opened = cache.get(info.path)
        if opened is not None:
            cache.move_to_end(info.path)
            return opened
        try:
            opened = _Open(self.av, info.path)
        except FileNotFoundError:
            raise DataNotFoundError(f"{WHO}: video file {info.path!r} no longer exists") from None
        except Exception as e:
            raise DecodeError(f"{WHO}: cannot open video {info.path!r}: {e}") from e
        cache[info.path] = opened
        while len(cache) > self.cache_size:
            _, old = cache.popitem(last=False)
            old.close()
        return opened

    def _drop(self, info: VideoInfo) -> None:
        opened = self._cache().pop(info.path, None)
        if opened is not None:
            opened.close()

    def _convert(self, frame) -> np.ndarray:
        if self.image_type == "YCbCr":
            planes = frame.to_ndarray(format="yuv444p")  # (3, H, W)
            return np.moveaxis(planes, 0, -1)
        return frame.to_ndarray(format="rgb24")

    def decode(self, info: VideoInfo, frames: np.ndarray, out: np.ndarray) -> None:
        """Decode ``frames`` (ascending frame indices, all valid) into ``out[:len(frames)]``."""
        try:
            done = self._decode(info, frames, out, from_start=False)
            if done < len(frames):
                # Inexact seeking or a damaged index: decode from the first frame once.
                self._drop(info)
                done += self._decode(info, frames[done:], out[done:], from_start=True)
            if done < len(frames):
                raise DecodeError(
                    f"{WHO}: frame {int(frames[done])} of {info.path!r} could not be decoded "
                    f"(the video has {info.num_frames} frames by its index; truncated or "
                    "corrupt file?)"
                )
        except (DecodeError, DataNotFoundError):
            self._drop(info)
            raise
        except Exception as e:
            self._drop(info)
            raise DecodeError(f"{WHO}: cannot decode {info.path!r}: {e}") from e

    def _decode(
        self, info: VideoInfo, frames: np.ndarray, out: np.ndarray, from_start: bool
    ) -> int:
        """Decode as many of ``frames`` as possible; returns how many were decoded."""
        opened = self._open(info)
        first = int(frames[0])
        key = info.keyframe_before(first)
        pos = opened.next_index
        if from_start:
            opened.frames = opened.container.decode(opened.stream)
            opened.next_index = 0
        elif opened.frames is None or pos is None or not key <= pos <= first:
            # Seek to the keyframe (a packet timestamp) and decode forward from there.
            opened.container.seek(
                int(info.pts[key]), stream=opened.stream, backward=True, any_frame=False
            )
            opened.frames = opened.container.decode(opened.stream)
            opened.next_index = key
        j, want = 0, first
        last = -1
        for frame in opened.frames:
            index = info.index_of_pts.get(frame.pts) if frame.pts is not None else None
            if index is None:
                index = last + 1 if last >= 0 else opened.next_index
            last = index
            opened.next_index = index + 1
            if index < want:
                continue
            if index > want:  # the seek landed past the frame, or a frame is missing
                break
            out[j] = self._convert(frame)
            j += 1
            if j == len(frames):
                return j
            want = int(frames[j])
        opened.frames = None
        opened.next_index = None
        return j
