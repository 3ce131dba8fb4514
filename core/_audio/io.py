"""Audio decoding for ``decoders.audio`` and ``readers.nemo_asr``: WAV, FLAC and OGG/Vorbis.

DALI decodes with libsndfile (``dali/operators/decoder/audio/generic_decoder.cc``) and so does
this module, through the ``soundfile`` package (its wheels bundle libsndfile), when installed:
the same library gives the same samples, conversions included. Without it, PCM and IEEE-float
WAV files are parsed here (:func:`_parse_wav`) and converted the way libsndfile converts them by
default:

* to float32: integers are normalised by the type's negative extreme (8-bit WAV is unsigned:
  ``(x - 128) / 128``; 16-bit ``x / 32768``; 24-bit ``x / 2**23``; 32-bit ``x / 2**31``); float
  data is passed through.
* to int16 / int32: integer data is shifted to the target width (``x << 16`` for 16 -> 32 bits,
  ``x >> 8`` for 24 -> 16 bits, ...); float data is rounded to the nearest integer *without*
  scaling (libsndfile's default ``SFC_SET_SCALE_FLOAT_INT_READ`` off: 0.5 reads as 0).

FLAC and OGG need ``soundfile``: ``pip install "dlpipe[audio]"``.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import DecodeError, MissingExtraError

__all__ = ["AudioFile", "open_audio", "soundfile_available", "to_output_type"]

# WAVE format tags (mmreg.h) and the sub-format of WAVE_FORMAT_EXTENSIBLE.
_WAVE_PCM, _WAVE_FLOAT, _WAVE_EXTENSIBLE = 0x0001, 0x0003, 0xFFFE

_SOUNDFILE = None  # the module once imported; False when unavailable


def soundfile_available() -> bool:
    """Whether ``soundfile`` (libsndfile) can be imported: FLAC/OGG decoding needs it."""
    global _SOUNDFILE
    if _SOUNDFILE is None:
        try:
            import soundfile

            _SOUNDFILE = soundfile
        except (ImportError, OSError):  # OSError: the module is there, libsndfile is not
            _SOUNDFILE = False
    return _SOUNDFILE is not False


@dataclass
class AudioFile:
    """An opened audio stream: its metadata, and :meth:`read` for its frames.

    Attributes:
        frames: the number of frames (samples per channel).
        channels: the channel count.
        sample_rate: frames per second (Hz).
        source: what to name in errors (a path, or "<encoded data>").
    """

    frames: int
    channels: int
    sample_rate: int
    source: str
    _sf: object = None  # a soundfile.SoundFile
    _pcm: np.ndarray | None = None  # the fallback's raw (frames, channels) samples
    _kind: str = ""  # the fallback's sample kind: "u8", "i16", "i24", "i32", "f32", "f64"

    def read(self, dtype, offset: int = 0, frames: int = -1) -> np.ndarray:
        """``frames`` frames (all that remain when -1) from frame ``offset``, as a C-contiguous
        (frames, channels) array of ``dtype`` (int16, int32 or float32), converted as
        libsndfile's ``sf_readf_short`` / ``sf_readf_int`` / ``sf_readf_float`` do."""
        dt = np.dtype(dtype)
        if frames < 0:
            frames = max(self.frames - offset, 0)
        if self._sf is not None:
            f = self._sf
            try:
                if offset:
                    f.seek(offset)
                out = f.read(frames, dtype=dt.name, always_2d=True)
            except Exception as e:  # soundfile.LibsndfileError, RuntimeError
                raise DecodeError(f"cannot decode audio {self.source}: {e}") from None
            if out.shape[0] != frames:
                raise DecodeError(
                    f"cannot decode audio {self.source}: requested {frames} frames but got "
                    f"{out.shape[0]}"
                )
            return np.ascontiguousarray(out)
        return _convert_pcm(self._pcm[offset : offset + frames], self._kind, dt)

    def close(self) -> None:
        if self._sf is not None:
            self._sf.close()
            self._sf = None


def open_audio(data: bytes | np.ndarray | str, source: str = "") -> AudioFile:
    """Open encoded audio: bytes (or a uint8 array) of a whole file, or a file path.

    Raises:
        DecodeError: the data is not audio this module can decode (naming ``source``).
        MissingExtraError: a FLAC/OGG stream while ``soundfile`` is not installed.
    """
    is_path = isinstance(data, str)
    source = source or (data if is_path else "<encoded data>")
    if soundfile_available():
        fast = _exact_pcm_wav(data, source)
        if fast is not None:
            return fast
        sf = _SOUNDFILE
        try:
            f = sf.SoundFile(data if is_path else io.BytesIO(_as_bytes(data)))
        except Exception as e:  # soundfile.LibsndfileError (a RuntimeError), TypeError
            if is_path and not _exists(data):
                from ..errors import DataNotFoundError

                raise DataNotFoundError(f"audio file {data!r} does not exist") from None
            raise DecodeError(f"cannot decode audio {source}: {e}") from None
        return AudioFile(int(f.frames), int(f.channels), int(f.samplerate), source, _sf=f)
    if is_path:
        from ..errors import DataNotFoundError

        try:
            with open(data, "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            raise DataNotFoundError(f"audio file {data!r} does not exist") from None
    else:
        raw = _as_bytes(data)
    pcm, kind, rate = _parse_wav(raw, source)
    return AudioFile(pcm.shape[0], pcm.shape[1], rate, source, _pcm=pcm, _kind=kind)


# Integer PCM that the WAV parser converts exactly as libsndfile does (the float scale is a
# power of two): parsed here even when soundfile is installed, ~5x faster than libsndfile
# through soundfile's Python layer (the speech pipelines' 16-bit WAVs).
_EXACT_KINDS = ("u8", "i16", "i24")


def _exact_pcm_wav(data, source: str) -> AudioFile | None:
    """The file opened by the WAV parser when it is 8/16/24-bit integer PCM WAV, else None
    (libsndfile opens it, or reports what is wrong with it)."""
    if isinstance(data, str):
        try:
            with open(data, "rb") as fh:
                raw = fh.read()
        except OSError:
            return None
    else:
        try:
            raw = _as_bytes(data)
        except DecodeError:
            return None
    if bytes(raw[:4]) != b"RIFF" or bytes(raw[8:12]) != b"WAVE":
        return None
    try:
        pcm, kind, rate = _parse_wav(raw, source)
    except DecodeError:
        return None
    if kind not in _EXACT_KINDS:
        return None
    return AudioFile(pcm.shape[0], pcm.shape[1], rate, source, _pcm=pcm, _kind=kind)


def _exists(path: str) -> bool:
    import os

    return os.path.exists(path)


def _as_bytes(data) -> bytes | memoryview:
    if isinstance(data, bytes | bytearray | memoryview):
        return data
    arr = np.ascontiguousarray(data)
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise DecodeError(
            f"encoded audio must be 1-D uint8 data, got {arr.dtype} of shape {list(arr.shape)}"
        )
    return memoryview(arr)


# --- the fallback WAV parser ----------------------------------------------------------------------


def _parse_wav(raw, source: str) -> tuple[np.ndarray, str, int]:
    """(samples (frames, channels), kind, sample rate) of a PCM / IEEE-float RIFF WAVE file."""
    buf = bytes(raw[:12])
    if len(buf) < 12 or buf[:4] != b"RIFF" or buf[8:12] != b"WAVE":
        head = bytes(raw[:4])
        if head in (b"fLaC", b"OggS"):
            raise MissingExtraError(
                f"decoding {source} ({'FLAC' if head == b'fLaC' else 'OGG'}) needs the soundfile "
                'package (libsndfile); install it with: pip install "dlpipe[audio]"'
            )
        raise DecodeError(
            f"cannot decode audio {source}: not a RIFF/WAVE file (only WAV is decoded without "
            'soundfile; install it with: pip install "dlpipe[audio]")'
        )
    mv = memoryview(raw)
    pos, end = 12, len(mv)
    fmt = None
    data = None
    while pos + 8 <= end:
        cid = bytes(mv[pos : pos + 4])
        (size,) = struct.unpack_from("<I", mv, pos + 4)
        body = mv[pos + 8 : min(pos + 8 + size, end)]
        if cid == b"fmt ":
            fmt = bytes(body)
        elif cid == b"data":
            data = body
            if fmt is not None:
                break
        pos += 8 + size + (size & 1)  # chunks are word-aligned
    if fmt is None or len(fmt) < 16 or data is None:
        raise DecodeError(f"cannot decode audio {source}: WAV file without fmt/data chunks")
    tag, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _WAVE_EXTENSIBLE and len(fmt) >= 26:
        (tag,) = struct.unpack_from("<H", fmt, 24)  # first two bytes of the sub-format GUID
    if channels < 1 or rate < 1:
        raise DecodeError(f"cannot decode audio {source}: {channels} channels at {rate} Hz")
    kind = {
        (_WAVE_PCM, 8): "u8",
        (_WAVE_PCM, 16): "i16",
        (_WAVE_PCM, 24): "i24",
        (_WAVE_PCM, 32): "i32",
        (_WAVE_FLOAT, 32): "f32",
        (_WAVE_FLOAT, 64): "f64",
    }.get((tag, bits))
    if kind is None:
        raise DecodeError(
            f"cannot decode audio {source}: WAV format tag {tag:#06x} with {bits} bits per "
            'sample needs soundfile (pip install "dlpipe[audio]")'
        )
    width = bits // 8
    if block_align != width * channels:
        raise DecodeError(f"cannot decode audio {source}: block align {block_align} mismatch")
    frames = len(data) // block_align
    flat = np.frombuffer(data, np.uint8, frames * block_align)
    if kind == "i24":  # little-endian 3-byte integers, sign-extended
        b = flat.reshape(-1, 3).astype(np.int32)
        pcm = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8
    else:
        pcm = flat.view({"u8": "u1", "i16": "<i2", "i32": "<i4", "f32": "<f4", "f64": "<f8"}[kind])
    return pcm.reshape(frames, channels), kind, int(rate)


# libsndfile's default normalisation to float, per integer kind
_FLOAT_SCALE = {"i16": 1 / 0x8000, "i24": 1 / 0x800000, "i32": 1 / 0x80000000}
_BITS = {"u8": 8, "i16": 16, "i24": 24, "i32": 32}


def _convert_pcm(pcm: np.ndarray, kind: str, dt: np.dtype) -> np.ndarray:
    if kind in ("f32", "f64"):
        if dt == np.float32:
            return np.ascontiguousarray(pcm, dtype=np.float32)
        info = np.iinfo(dt)  # unscaled lrint, saturated (libsndfile's defaults)
        return np.clip(np.rint(pcm.astype(np.float64)), info.min, info.max).astype(dt)
    if dt == np.float32:
        # int -> float32 rounds once (exact up to 24 bits), the power-of-two scale is exact:
        # libsndfile's ``(float) x * normfact``
        if kind == "u8":
            out = pcm.astype(np.float32)
            out -= np.float32(128)
            out *= np.float32(1 / 0x80)
            return out
        out = pcm.astype(np.float32)  # then an in-place product: ~15% faster than one
        out *= np.float32(_FLOAT_SCALE[kind])  # multiply casting int16 on the way
        return out
    if kind == "u8":
        x = pcm.astype(np.int32) - 128
    else:
        x = pcm.astype(np.int32)
    shift = (16 if dt == np.int16 else 32) - _BITS[kind]
    out = x << shift if shift >= 0 else x >> -shift
    return np.ascontiguousarray(out, dtype=dt)


# --- DALI's conversions -------------------------------------------------------------------------


def to_output_type(x: np.ndarray, dtype) -> np.ndarray:
    """DALI's ``ConvertSatNorm<Out>(float)``: float32 values in -1..1 to ``dtype``.

    Integers: ``clamp(round(x * max))`` with ``max`` the type's maximum as a float32 and rounding
    half away from zero (unsigned types clamp negatives to 0). Floats pass through.
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.ascontiguousarray(x, dtype=dt)
    info = np.iinfo(dt)
    y = (np.asarray(x, np.float32) * np.float32(info.max)).astype(np.float64)
    y = np.copysign(np.floor(np.abs(y) + 0.5), y)
    return np.clip(y, info.min, info.max).astype(dt)


def downmix(x: np.ndarray) -> np.ndarray:
    """DALI's ``Downmix``: the mean of the channels of float32 (frames, channels) data, summed
    channel by channel in float32 with weights ``1/channels``."""
    channels = x.shape[1]
    w = np.float32(1.0 / channels)
    out = x[:, 0] * w
    for c in range(1, channels):
        out += x[:, c] * w
    return out
