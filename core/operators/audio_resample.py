"""``fn.audio_resample`` (and its legacy alias ``fn.experimental.audio_resample``): resampling
with DALI's windowed sinc (``dali/operators/audio/resample.*``; the filter is described in
``_audio/resampling.py``).

The ratio comes from exactly one of: ``in_rate`` and ``out_rate`` together, ``scale`` (output
rate over input rate), or ``out_length`` (the output length; the ratio is out/in length). All
four may be per-sample argument inputs. Rates and scale are float32 (DALI's argument type);
the output length is ``ceil(length * out_rate / in_rate)``, except with ``out_length``.

The input is (time,) or (time, channels), of int8, uint8, int16, uint16, int32, uint32 or
float32. It is resampled in float: integers are normalised to -1..1 (``x / max``) or 0..1
(unsigned); when ``dtype`` changes signedness, 0..1 is mapped to -1..1 or back. The result is
written to ``dtype`` (default: the input's) as ``round(x * max)``, saturated. Layout kept.
"""

from __future__ import annotations

import numpy as np

from .._audio.io import to_output_type
from .._audio.resampling import check_quality, lobes_from_quality, resample, resampled_length
from ..errors import ArgumentError
from ..graph import Operator, register
from ._audio_args import float_arg, int_arg
from .cast import parse_dtype

__all__ = ["AudioResample", "resample_params", "to_float_signal"]

RESAMPLE_DTYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.float32)


def to_float_signal(x: np.ndarray, out_dtype: np.dtype) -> np.ndarray:
    """DALI's ``ConvertInput``: the float32 signal the resampler filters."""
    out_signed = out_dtype.kind in "if"
    if x.dtype.kind == "f":
        f = x.astype(np.float32)
        return f if out_signed else (f + np.float32(1)) * np.float32(0.5)
    f = x.astype(np.float32) * (np.float32(1) / np.float32(np.iinfo(x.dtype).max))
    if not out_signed and x.dtype.kind == "i":
        return (f + np.float32(1)) * np.float32(0.5)
    if out_signed and x.dtype.kind == "u":
        return f * np.float32(2) - np.float32(1)
    return f


def normalization(in_dtype, out_dtype) -> tuple[float, float, float]:
    """(scale, mul, add) with ``to_float_signal(x) == x * scale * mul + add`` (the GPU's form)."""
    in_dtype, out_dtype = np.dtype(in_dtype), np.dtype(out_dtype)
    out_signed = out_dtype.kind in "if"
    if in_dtype.kind == "f":
        return (1.0, 1.0, 0.0) if out_signed else (1.0, 0.5, 0.5)
    scale = float(np.float32(1) / np.float32(np.iinfo(in_dtype).max))
    if not out_signed and in_dtype.kind == "i":
        return scale, 0.5, 0.5
    if out_signed and in_dtype.kind == "u":
        return scale, 2.0, -1.0
    return scale, 1.0, 0.0


def resample_params(length: int, in_rate=None, out_rate=None, scale=None, out_length=None, who=""):
    """(in_rate, out_rate, output length) of one sample from whichever ratio was given."""
    if in_rate is not None:
        in_r, out_r = float(np.float32(in_rate)), float(np.float32(out_rate))
        if not in_r > 0:
            raise ArgumentError(
                f"{who}: input sampling rates must be positive, got in_rate={in_rate}"
            )
        if not out_r >= 0:
            raise ArgumentError(
                f"{who}: output sampling rates must be non-negative, got out_rate={out_rate}"
            )
        return in_r, out_r, resampled_length(length, in_r, out_r)
    if scale is not None:
        s = float(np.float32(scale))
        if not s >= 0:
            raise ArgumentError(
                f"{who}: the scaling factor must be non-negative, got scale={scale}"
            )
        return 1.0, s, resampled_length(length, 1.0, s)
    n = int(out_length)
    if n < 0:
        raise ArgumentError(f"{who}: out_length={out_length} must be >= 0")
    if length == 0 and n != 0:
        raise ArgumentError(f"{who}: cannot produce a non-empty signal from an empty input")
    return float(length or 1), float(n or 1), n


@register(legacy=("AudioResample",))
class AudioResample(Operator):
    """Resamples an audio signal with a Hann-windowed sinc filter.

    Args:
        in_rate, out_rate: input and output sampling rates (given together; any unit).
        scale: output rate / input rate (``scale=2`` doubles the samples).
        out_length: the output length in samples.
        quality: 0..100 (default 50): the filter's lobes are 3 at 0, 16 at 50, 64 at 100.
        dtype: the output type (default: the input's); values are rescaled to its range.

    Exactly one of (in_rate, out_rate), scale, out_length is given; each may be a per-sample
    argument input.

    Example:
        >>> slower = fn.audio_resample(audio, scale=fn.random.uniform(range=[0.9, 1.1]))
    """

    process_safe = True  # see Operator; the sample processes may run it
    holds_gil = True

    schema = "audio_resample"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"in_rate", "out_rate", "scale", "out_length"})

    def setup(
        self, *, in_rate=None, out_rate=None, scale=None, out_length=None, quality=50.0, dtype=None
    ) -> None:
        who = self.schema
        # the ratio arguments given as constants; after_call adds the argument inputs and
        # checks the combination
        self.static = {
            k: v
            for k, v in (
                ("in_rate", in_rate),
                ("out_rate", out_rate),
                ("scale", scale),
                ("out_length", out_length),
            )
            if v is not None
        }
        for k, v in self.static.items():
            if k == "out_length":
                int_arg(v, k, who, 0)
            else:
                float_arg(v, k, who)
        self.lobes = lobes_from_quality(check_quality(quality, who))
        self.dtype = None if dtype is None else parse_dtype(dtype, who, allowed=RESAMPLE_DTYPES)
        self._given: set[str] | None = None
        self._layout = ""

    def _check_given(self, given: set[str]) -> None:
        who = self.schema
        if ("in_rate" in given) != ("out_rate" in given):
            raise ArgumentError(
                f"{who}: the parameters in_rate and out_rate must be given together"
            )
        kinds = ("in_rate" in given) + ("scale" in given) + ("out_length" in given)
        if kinds > 1:
            raise ArgumentError(
                f"{who}: the sampling rates, scale and out_length cannot be used together "
                f"(got {sorted(given)})"
            )
        if kinds == 0:
            raise ArgumentError(
                f"{who}: no resampling factor given; give either scale, out_length, or in_rate "
                "and out_rate"
            )

    def after_call(self, outputs):
        node = outputs[0].source
        self._given = set(self.static) | set(node.arg_nodes)
        self._check_given(self._given)
        return outputs

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def sample_params(self, x: np.ndarray, args: dict):
        """(in_rate, out_rate, out_length) of one sample, and the output dtype."""
        who = self.schema
        if x.ndim not in (1, 2):
            raise ArgumentError(
                f"{who}: audio resampling supports only time series data, with an optional "
                f"innermost channel dimension; got shape {list(x.shape)}"
            )
        if x.dtype not in [np.dtype(t) for t in RESAMPLE_DTYPES]:
            raise ArgumentError(f"{who}: unsupported input type {x.dtype}")
        vals = dict(self.static)
        for k, v in args.items():
            v = np.asarray(v)
            if v.size != 1:
                raise ArgumentError(f"{who}: argument input {k!r} must have one value per sample")
            vals[k] = v.reshape(()).item()
        return resample_params(x.shape[0], who=who, **vals), np.dtype(self.dtype or x.dtype)

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        (in_rate, out_rate, n_out), dtype = self.sample_params(x, args)
        f = to_float_signal(x, dtype)
        y = resample(f, in_rate, out_rate, self.lobes, out_length=n_out)
        return to_output_type(y, dtype)

    def run_batch(self, inputs, args, params, stream):
        """GPU: every sample in one launch, with the CPU's positions (float32 running sums per
        block of 256 outputs) and window arithmetic; only the order of the sum over the taps
        differs (float rounding: ~1e-7 of the signal, or a rounding flip of integer outputs)."""
        from .._audio.resampling import window
        from ..kernels.audio import contiguous, resample_batch

        s = contiguous(inputs[0])
        n = len(s)
        if n == 0:
            return s
        vals = {k: list(v) for k, v in args.items()}
        per_sample = [{k: v[i] for k, v in vals.items()} for i in range(n)]
        scales, lengths = [], []
        for shape, a in zip(s.shape_list(), per_sample, strict=True):
            (in_rate, out_rate, n_out), dtype = self.sample_params(np.empty(shape, s.dtype), a)
            scales.append(in_rate / out_rate if n_out else 1.0)
            lengths.append(n_out)
        in_scale, in_mul, in_add = normalization(s.dtype, dtype)
        return resample_batch(
            s, scales, lengths, window(self.lobes), dtype, in_scale, in_mul, in_add, stream=stream
        )


@register
class ExperimentalAudioResample(AudioResample):
    """Legacy alias of :func:`audio_resample` (DALI moved it out of ``experimental`` in 1.18)."""

    schema = "experimental.audio_resample"
    ops_name = "AudioResample"
