"""``fn.readers.nemo_asr``: speech and transcripts from NVIDIA NeMo manifests (DALI's
``readers__NemoAsr``, ``dali/operators/reader/nemo_asr_reader_op.cc`` and
``loader/nemo_asr_loader.cc``).

A manifest is JSON lines, one utterance each::

    {"audio_filepath": "a.wav", "duration": 3.45, "text": "hello world"}
    {"audio_filepath": "a.wav", "offset": 3.45, "duration": 1.45, "text": "same file, later"}

``audio_filepath`` is required (lines without it, and lines that are not JSON objects, are
skipped with a warning) and opened as written (relative paths from the working directory, as in
DALI). ``offset`` (seconds) skips ``int(offset * rate)`` frames and ``duration`` keeps
``int(duration * rate)`` of them (the whole rest of the file when absent). ``min_duration`` /
``max_duration`` (when > 0) drop entries whose ``duration`` field is out of range; an entry
without one counts as -1, so ``min_duration`` drops it. The index output is the entry's position
among the kept entries of its manifest file (DALI counts per file).

Outputs: the audio (decoded like ``decoders.audio``: ``dtype``, ``downmix`` (default True: 1-D),
resampled to ``sample_rate`` when given), then, when asked for, the file's sample rate (float32
scalar; DALI reports the file's rate even when resampling), the text (uint8 bytes, no
terminator) and the index (int64, shape (1,)).

Sharding, shuffling, padding, ``reader_meta`` and checkpoints are the shared ones
(``_sharding.py``), as for ``readers.file``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._audio.io import open_audio
from .._audio.resampling import lobes_from_quality
from .._dtype import parse_dtype
from ..decoders.audio import AUDIO_DTYPES, check_quality, decode_audio
from ..errors import ArgumentError, DataNotFoundError
from ..graph import Operator, register
from ..types import DALIDataType
from ._sharding import ListSharding, ShardedReader

__all__ = ["NemoAsrEntry", "NemoAsrReader", "parse_manifest"]


@dataclass
class NemoAsrEntry:
    """One utterance of a manifest."""

    audio_filepath: str
    duration: float = -1.0
    offset: float = 0.0
    text: str = ""
    index: int = 0


def parse_manifest(
    path: str, min_duration: float = 0.0, max_duration: float = 0.0, read_text: bool = True
) -> list[NemoAsrEntry]:
    """The kept entries of one manifest file (see the module docstring for the rules).

    Raises:
        DataNotFoundError: the file cannot be opened.
    """
    try:
        f = open(path, encoding="utf-8")
    except OSError:
        raise DataNotFoundError(
            f'readers.nemo_asr: could not open NEMO ASR manifest file: "{path}"'
        ) from None
    entries: list[NemoAsrEntry] = []
    with f:
        for line in f:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            if not isinstance(obj, dict):
                warnings.warn(f"Skipping invalid manifest line: {line.rstrip()}", stacklevel=2)
                continue
            audio = obj.get("audio_filepath")
            if not audio:
                warnings.warn(
                    f"Skipping manifest line without an audio filepath: {line.rstrip()}",
                    stacklevel=2,
                )
                continue
            duration = float(obj.get("duration", -1.0))
            if (max_duration > 0 and duration > max_duration) or (
                min_duration > 0 and duration < min_duration
            ):
                continue
            text = obj.get("text", "") if read_text else ""
            entries.append(
                NemoAsrEntry(
                    str(audio), duration, float(obj.get("offset", 0.0)), str(text), len(entries)
                )
            )
    return entries


@register(legacy=("NemoAsrReader",))
class NemoAsrReader(ShardedReader, Operator):
    """Reads audio (and transcripts) listed in NeMo ASR manifests.

    Args:
        manifest_filepaths: manifest files (a list, or one path).
        read_sample_rate: output the sample rate (default True).
        read_text: output the transcript as uint8 bytes (default True).
        read_idxs: output the entry's index in its manifest, int64 (default False).
        dtype: INT16, INT32 or FLOAT (default).
        downmix: average the channels into one, 1-D output (default True).
        sample_rate: resample to this rate (default: keep the file's).
        quality: resampling quality 0..100 (default 50).
        min_duration, max_duration: keep entries with a duration in range (0: no bound).
        shuffle_after_epoch, shuffle_after_epoch_seed, random_shuffle, initial_fill, shard_id,
        num_shards, stick_to_shard, pad_last_batch: as in ``readers.file``.

    Example:
        >>> audio, text = fn.readers.nemo_asr(manifest_filepaths=["train.json"],
        ...                                   read_sample_rate=False, sample_rate=16000,
        ...                                   name="Reader")
    """

    schema = "readers.nemo_asr"
    num_inputs = (0, 0)
    is_random = True
    is_reader = True
    # run_sample is a pure function of the entry index the stage draws: decoding (and
    # resampling) an utterance is numpy calls with Python between them, so with threads the
    # reader held NeMo's pipelines to a fifth of DALI's (BENCHMARKS.md "Side by side with
    # DALI: 2026-11-27, fourteenth session"); the sample processes decode instead
    process_safe = True
    holds_gil = True

    def setup(
        self,
        *,
        manifest_filepaths: Sequence[str] | str | None = None,
        read_sample_rate: bool = True,
        read_text: bool = True,
        read_idxs: bool = False,
        dtype=DALIDataType.FLOAT,
        downmix: bool = True,
        sample_rate: float = -1.0,
        quality: float = 50.0,
        min_duration: float = 0.0,
        max_duration: float = 0.0,
        shuffle_after_epoch: bool = False,
        shuffle_after_epoch_seed: int | None = None,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        shard_id: int | None = 0,
        num_shards: int | None = 1,
        stick_to_shard: bool = False,
        pad_last_batch: bool = False,
        prefetch_queue_depth: int = 1,
        read_ahead: bool = False,
        dont_use_mmap: bool = False,
        lazy_init: bool = False,
        skip_cached_images: bool = False,
        tensor_init_bytes: int = 1048576,
        normalize_text: bool | None = None,
    ) -> None:
        who = self.schema
        if isinstance(manifest_filepaths, str):
            manifest_filepaths = [manifest_filepaths]
        if not manifest_filepaths:
            raise ArgumentError(
                f"{who}: manifest_filepaths={manifest_filepaths!r} can not be empty"
            )
        self.dtype = parse_dtype(dtype, who, allowed=AUDIO_DTYPES)
        if self.dtype is None:
            raise ArgumentError(f"{who}: dtype={dtype!r} is not supported")
        self.lobes = lobes_from_quality(check_quality(quality, who))
        rate = float(sample_rate if sample_rate is not None else -1.0)
        self.target_rate = float(np.float32(rate)) if rate > 0 else None
        self.downmix = bool(downmix)
        self.read_sample_rate = bool(read_sample_rate)
        self.read_text = bool(read_text)
        self.read_idxs = bool(read_idxs)
        self.num_outputs = 1 + self.read_sample_rate + self.read_text + self.read_idxs
        self.entries: list[NemoAsrEntry] = []
        # None is "not given" in DALI (NeMo passes its config's max_duration=None as is)
        lo = 0.0 if min_duration is None else float(min_duration)
        hi = 0.0 if max_duration is None else float(max_duration)
        for path in manifest_filepaths:
            self.entries += parse_manifest(path, lo, hi, self.read_text)
        if not self.entries:
            raise DataNotFoundError(
                f"{who}: no files found in the manifests {list(manifest_filepaths)}"
            )
        self.loader = ListSharding(
            len(self.entries),
            shard_id=0 if shard_id is None else shard_id,
            num_shards=1 if num_shards is None else num_shards,
            random_shuffle=random_shuffle,
            initial_fill=initial_fill,
            shuffle_after_epoch=shuffle_after_epoch,
            shuffle_after_epoch_seed=shuffle_after_epoch_seed,
            stick_to_shard=stick_to_shard,
            pad_last_batch=pad_last_batch,
            who=f"{who} {self.name or ''}".strip(),
        )

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs

    def __getstate__(self) -> dict:
        """What a sample process needs to decode an entry: not the sharding's state (the
        pipeline's process draws the entries)."""
        state = dict(self.__dict__)
        state.pop("loader", None)
        return state

    def source_info(self, param: int) -> str:
        return self.entries[param].audio_filepath

    def run_sample(self, inputs, args, param):
        e = self.entries[param]
        f = open_audio(e.audio_filepath)
        try:
            offset = int(e.offset * f.sample_rate) if e.offset >= 0 else 0
            length = int(e.duration * f.sample_rate) if e.duration >= 0 else f.frames
            length = min(length, max(f.frames - offset, 0))
            audio = decode_audio(
                f, self.dtype, self.downmix, self.target_rate, self.lobes, offset, length
            )
        finally:
            f.close()
        out = [audio]
        if self.read_sample_rate:
            out.append(np.array(f.sample_rate, np.float32))
        if self.read_text:
            out.append(np.frombuffer(e.text.encode("utf-8"), np.uint8).copy())
        if self.read_idxs:
            out.append(np.array([e.index], np.int64))
        return tuple(out) if len(out) > 1 else out[0]
