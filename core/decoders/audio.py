"""``fn.decoders.audio``: WAV, FLAC and OGG/Vorbis to samples, with optional downmix and
resampling (DALI's ``decoders__Audio``, ``dali/operators/decoder/audio/``).

Outputs, per sample:

* the audio: (time,) with ``downmix=True`` (whatever the file's channels), else (time, channels),
  a mono file included ((time, 1)); interleaved, time first. No layout is set (DALI sets none).
  ``dtype`` INT16, INT32 or FLOAT (default). Without downmix or resampling the samples come
  straight from libsndfile's conversion (16-bit PCM read as float is ``x / 32768``); with either,
  the file is read as float, downmixed (the channel mean) and/or resampled in float, and written
  to integer types as ``round(x * max)`` saturated (DALI's ``ConvertSatNorm``).
* the sample rate: a float32 scalar (shape ()), the file's rate, or ``sample_rate`` when given.

Decoding uses ``soundfile`` (libsndfile, as DALI does) when installed; PCM/float WAV decodes
without it (see ``_audio/io.py``).
"""

from __future__ import annotations

import numpy as np

from .._audio.io import downmix, open_audio, to_output_type
from .._audio.resampling import check_quality, lobes_from_quality, resample
from .._dtype import parse_dtype
from ..errors import ArgumentError
from ..graph import Operator, register
from ..types import DALIDataType

__all__ = ["AudioDecoder", "check_quality", "decode_audio"]

AUDIO_DTYPES = (np.int16, np.int32, np.float32)


def decode_audio(
    audio_file,
    dtype,
    downmix_channels: bool,
    target_rate: float | None,
    lobes: int,
    offset: int = 0,
    frames: int = -1,
) -> np.ndarray:
    """Decode an opened :class:`~dlpipe._audio.io.AudioFile` the way DALI's
    ``DecodeAudio`` does.

    Args:
        audio_file: the opened stream.
        dtype: int16, int32 or float32.
        downmix_channels: average the channels into one; the result is then 1-D.
        target_rate: resample to this rate when it differs from the file's (None: never).
        lobes: the resampling filter's lobes.
        offset, frames: the frames to decode (DALI's NeMo reader's offset/duration).

    Returns:
        (time,) when ``downmix_channels``, else (time, channels).
    """
    f = audio_file
    if frames < 0:
        frames = max(f.frames - offset, 0)
    should_resample = target_rate is not None and float(target_rate) != float(f.sample_rate)
    should_downmix = downmix_channels and f.channels > 1
    if not should_resample and not should_downmix:
        out = f.read(dtype, offset, frames)
    else:
        x = f.read(np.float32, offset, frames)
        if should_downmix:
            x = downmix(x)
        if should_resample:
            x = resample(x, f.sample_rate, float(target_rate), lobes)
        out = to_output_type(x, dtype)
    if downmix_channels:
        out = out.reshape(-1)
    return out


def parse_target_rate(value, who: str, name: str = "sample_rate") -> float:
    """A target sample rate (a number or a 1-element per-sample array) that must be > 0."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.size != 1 or not np.isfinite(arr).all() or float(arr.reshape(())) <= 0:
        raise ArgumentError(f"{who}: {name}={value!r} must be a positive number")
    return float(np.float32(arr.reshape(())))


@register(legacy=("AudioDecoder",))
class AudioDecoder(Operator):
    """Decodes WAV, FLAC and OGG/Vorbis audio into samples and their sample rate.

    Args:
        downmix: average all channels into one; the output is then 1-D (time,). Otherwise it
            is (time, channels) (default False).
        dtype: INT16, INT32 or FLOAT (default).
        sample_rate: resample to this rate, in Hz (a number, or a per-sample argument input,
            e.g. ``fn.random.uniform(range=[0.9, 1.1]) * 16000`` for speed perturbation).
            Default: keep the file's rate.
        quality: resampling quality, 0..100 (default 50): the sinc filter's lobes are 3 at 0,
            16 at 50, 64 at 100.

    Returns:
        (audio, sample_rate): the samples, and the rate as a float32 scalar.

    Example:
        >>> encoded, _ = fn.readers.file(file_root="/data/speech")
        >>> audio, rate = fn.decoders.audio(encoded, dtype=types.FLOAT, downmix=True,
        ...                                 sample_rate=16000)
    """

    process_safe = True  # see Operator; the sample processes may run it
    holds_gil = True

    schema = "decoders.audio"
    num_outputs = 2
    arg_inputs = frozenset({"sample_rate"})

    def setup(
        self,
        *,
        downmix: bool = False,
        dtype=DALIDataType.FLOAT,
        sample_rate=None,
        quality: float = 50.0,
    ) -> None:
        self.downmix = bool(downmix)
        self.dtype = parse_dtype(dtype, self.schema, allowed=AUDIO_DTYPES)
        if self.dtype is None:
            raise ArgumentError(f"{self.schema}: dtype={dtype!r} is not supported")
        self.sample_rate = (
            None if sample_rate is None else parse_target_rate(sample_rate, self.schema)
        )
        self.quality = quality
        self.lobes = 0
        # DALI checks quality only when resampling (an argument-input rate: at the first run)
        self._check_resampling(self.sample_rate is not None)

    def _check_resampling(self, resampling: bool) -> None:
        if resampling and not self.lobes:
            self.lobes = lobes_from_quality(check_quality(self.quality, self.schema))

    def run_sample(self, inputs, args, param):
        target = self.sample_rate
        if "sample_rate" in args:
            target = parse_target_rate(args["sample_rate"], self.schema)
        self._check_resampling(target is not None)
        f = open_audio(inputs[0], "")
        try:
            audio = decode_audio(f, self.dtype, self.downmix, target, self.lobes)
        finally:
            f.close()
        rate = np.array(target if target is not None else f.sample_rate, np.float32)
        return audio, rate
