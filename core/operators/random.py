"""``fn.random.coin_flip``, ``fn.random.uniform`` and ``fn.random.normal``.

Each sample's output has the shape ``shape`` (an int or a list; per-sample argument input
allowed), or the shape of the optional positional input, or else is a 0-d scalar. Their outputs
usually feed argument inputs: ``fn.flip(images, horizontal=fn.random.coin_flip())``.

On the GPU (``device="gpu"``, or a GPU input whose samples' shapes set the output's) the same
numbers are drawn on the host and the batch is uploaded in one copy, so a seed gives the same
values on either device. (DALI draws them with cuRAND on the GPU; its values differ from its
own CPU operators'.) One exception: ``random.normal`` of a GPU input, floating point, without
argument inputs (the dither of a speech pipeline: ``audio + fn.random.normal(audio) * d``, up
to millions of numbers per sample) draws on the GPU, one cuRAND call per batch seeded from the
seed ``batch_params`` drew for the batch's first sample: a seed still gives the same batches,
but not the CPU's values (drawing them on the host took ~80 ms per batch of 32 utterances,
BENCHMARKS.md, "Speech: the dither on the GPU").

Determinism: every random number is drawn in ``batch_params`` from ``self.rng``, sequentially,
so a given seed gives the same batches whatever ``num_threads`` is. When the shape is known up
front (static ``shape``, or a scalar) the numbers themselves are drawn there; otherwise (shape
from the input or from an argument input) a per-sample seed is drawn there and the sample's
generator is made from it in ``run_sample``. Distribution parameters that arrive as argument
inputs (``probability``, ``range``, ``values``, ``mean``, ``stddev``) transform the base
uniform or standard-normal numbers per sample.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import SMALL_ELEMENTS, Operator, register
from ..kernels._batch import alloc_batch
from ..types import DALIDataType
from .cast import convert_sat, parse_dtype

__all__ = ["CoinFlip", "Normal", "Uniform"]


def _shape_tuple(shape, who: str) -> tuple[int, ...]:
    arr = np.atleast_1d(np.asarray(shape))
    if arr.ndim != 1 or arr.dtype.kind not in "iuf" or (arr.size and (arr < 0).any()):
        raise ArgumentError(f"{who}: shape={shape!r} must be a non-negative int or list of ints")
    if arr.dtype.kind == "f" and not np.all(arr == np.floor(arr)):
        raise ArgumentError(f"{who}: shape={shape!r} must hold whole numbers")
    return tuple(int(v) for v in arr)


def _scalar(v) -> float:
    return float(np.asarray(v).reshape(-1)[0]) if np.ndim(v) else float(v)


class _Draws:
    """The parameters ``batch_params`` drew for a batch, ``(numbers, seed)`` per sample (as
    ``x[i]``, ``len``, iteration and ``take``), made only when asked for: the batch path
    (``run_batch_cpu``) takes the numbers as the one array they were drawn in (``pre``),
    and making 128 pairs a batch it never reads cost ~15 us per operator (BENCHMARKS.md,
    "The CPU stage without per-sample lists")."""

    __slots__ = ("pre", "seeds")

    def __init__(self, pre: np.ndarray, seeds: list[int]):
        self.pre = pre
        self.seeds = seeds

    def __len__(self) -> int:
        return len(self.seeds)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self.seeds)))]
        return (self.pre[i], self.seeds[i])

    def __iter__(self):
        return zip(self.pre, self.seeds, strict=True)

    def take(self, indices) -> list:
        """The samples ``indices``' parameters, as a list (a conditional branch's)."""
        return [(self.pre[j], self.seeds[j]) for j in indices]


class _RandomBase(Operator):
    num_inputs = (0, 1)
    devices = ("cpu", "gpu")
    is_random = True
    _base = "uniform"  # or "normal": the base distribution drawn up front

    def _setup_base(self, shape, dtype, default_dtype) -> None:
        self.shape = None if shape is None else _shape_tuple(shape, self.schema)
        self.dtype = parse_dtype(default_dtype if dtype is None else dtype, self.schema)
        self._has_input = False

    def output_layouts(self, input_layouts):
        self._has_input = len(input_layouts) > 0
        if self._has_input and self.shape is not None:
            raise ArgumentError(
                f"{self.schema}: shape={list(self.shape)} cannot be combined with an input "
                "(the output takes the input's shape)"
            )
        return [""]

    def _draw(self, rng: np.random.Generator, shape) -> np.ndarray:
        if self._base == "normal":
            return rng.standard_normal(shape)
        return rng.random(shape)

    def batch_params(self, n):
        seeds = self.rng.integers(0, 2**63 - 1, n, dtype=np.int64).tolist()
        if self._has_input:
            return [(None, s) for s in seeds]
        return _Draws(self._draw(self.rng, (n, *(self.shape or ()))), seeds)

    def batch_level_in(self, node) -> bool:
        # Nothing per sample (no input, no argument input): the numbers drawn in batch_params
        # are turned into the batch in one go, not in a Python call per sample.
        return not node.inputs and not node.arg_nodes

    def small_output_in(self, node) -> bool:
        return self.batch_level_in(node) and int(np.prod(self.shape or ())) <= SMALL_ELEMENTS

    def run_batch_cpu(self, inputs, args, params):
        pre = getattr(params, "pre", None)  # the batch's numbers as drawn (_Draws)
        if pre is None:
            pre = np.stack([p[0] for p in params]) if params else np.empty((0, *(self.shape or ())))
        return (self.run_sample((), {}, (pre, None)),)

    def _sample_base(self, inputs, args, param) -> np.ndarray:
        pre, seed = param
        if inputs and "shape" in args:
            raise ArgumentError(
                f"{self.schema}: shape cannot be combined with an input (the output takes the "
                "input's shape)"
            )
        if inputs:
            shape = inputs[0].shape
        elif "shape" in args:
            shape = _shape_tuple(args["shape"], self.schema)
        else:
            return np.asarray(pre)
        return self._draw(np.random.default_rng(seed), shape)

    def run_batch(self, inputs, args, params, stream):
        """GPU: the numbers are drawn on the host exactly as on the CPU (from the same
        ``batch_params``, so a seed gives the same batches on either device) and the batch is
        uploaded in one copy; a GPU input only lends its samples' shapes."""
        from types import SimpleNamespace

        from ._copy import CopyToGpu

        if getattr(self, "_uploader", None) is None:
            self._uploader = CopyToGpu(device="mixed")
        n = len(params)
        if not inputs and not args:
            batch = self.run_batch_cpu((), {}, params)[0]
            samples = [batch[i, ...] for i in range(n)]
        else:
            shapes = inputs[0].shape_list() if inputs else [None] * n
            samples = [
                self.run_sample(
                    (SimpleNamespace(shape=shapes[i]),) if inputs else (),
                    {k: v[i] for k, v in args.items()},
                    params[i],
                )
                for i in range(n)
            ]
        return self._uploader.run_batch([samples], {}, None, stream)

    def _to_dtype(self, v: np.ndarray) -> np.ndarray:
        if v.dtype == self.dtype:
            return v
        return convert_sat(v, self.dtype)


@register(legacy=("CoinFlip",))
class CoinFlip(_RandomBase):
    """Random 0/1 values: 1 with probability ``probability``.

    Args:
        probability: chance of a 1 (default 0.5); per-sample argument input allowed.
        shape: output shape per sample (default: a scalar, or the input's shape).
        dtype: INT32 (default), BOOL, UINT8 or another numeric type.
        seed: the operator's own seed (default: derived from the pipeline seed).

    Example:
        >>> with pipe:
        ...     images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
    """

    schema = "random.coin_flip"
    light = True
    arg_inputs = frozenset({"probability", "shape"})

    def setup(self, *, probability=0.5, shape=None, dtype=None) -> None:
        self.probability = self._check_p(probability)
        self._setup_base(shape, dtype, DALIDataType.INT32)

    def _check_p(self, p) -> float:
        if np.ndim(p) or not 0.0 <= float(p) <= 1.0:
            raise ArgumentError(f"{self.schema}: probability={p!r} must be a number in [0, 1]")
        return float(p)

    def run_sample(self, inputs, args, param):
        p = (
            self.probability
            if "probability" not in args
            else self._check_p(_scalar(args["probability"]))
        )
        return self._to_dtype(self._sample_base(inputs, args, param) < p)


@register(legacy=("Uniform",))
class Uniform(_RandomBase):
    """Uniformly distributed random numbers: continuous in ``range`` = [min, max), or one of
    the discrete ``values``, each equally likely.

    Args:
        range: [min, max) (default [-1, 1]); per-sample argument input allowed.
        values: a list of discrete values (exclusive with ``range``); argument input allowed.
        shape: output shape per sample (default: a scalar, or the input's shape).
        dtype: FLOAT (default) or another numeric type (integers round and saturate).
        seed: the operator's own seed.

    Example:
        >>> with pipe:
        ...     angle = fn.random.uniform(range=(-10.0, 10.0))
    """

    schema = "random.uniform"
    light = True
    arg_inputs = frozenset({"range", "values", "shape"})

    def setup(self, *, range=None, values=None, shape=None, dtype=None) -> None:  # noqa: A002
        if range is not None and values is not None:
            raise ArgumentError(f"{self.schema}: range and values cannot be given together")
        self._range_given = range is not None
        self.range = self._check_range(range if range is not None else (-1.0, 1.0))
        self.values = None if values is None else self._check_values(values)
        self._setup_base(shape, dtype, DALIDataType.FLOAT)

    def _check_range(self, r) -> tuple[float, float]:
        arr = np.asarray(r, dtype=np.float64).reshape(-1)
        if arr.size != 2 or not arr[0] <= arr[1]:
            raise ArgumentError(f"{self.schema}: range={r!r} must be [min, max] with min <= max")
        return float(arr[0]), float(arr[1])

    def _check_values(self, v) -> np.ndarray:
        arr = np.asarray(v, dtype=np.float64).reshape(-1)
        if arr.size == 0:
            raise ArgumentError(f"{self.schema}: values={v!r} must not be empty")
        return arr

    def run_sample(self, inputs, args, param):
        if ("range" in args or self._range_given) and ("values" in args or self.values is not None):
            raise ArgumentError(f"{self.schema}: range and values cannot be given together")
        u = self._sample_base(inputs, args, param)
        values = self._check_values(args["values"]) if "values" in args else self.values
        if values is not None and "range" not in args:
            idx = np.minimum((u * values.size).astype(np.int64), values.size - 1)
            v = values[idx]
        else:
            lo, hi = self._check_range(args["range"]) if "range" in args else self.range
            v = lo + u * (hi - lo)
        if self.dtype.kind == "f":
            v = v.astype(self.dtype)
            if values is None and hi > lo:  # rounding to float32 must not reach max
                top = np.nextafter(self.dtype.type(hi), self.dtype.type(lo))
                v = np.minimum(v, top, out=v if v.ndim else None)
            return np.asarray(v, self.dtype)
        return self._to_dtype(np.asarray(v))


@register(legacy=("NormalDistribution",))
class Normal(_RandomBase):
    """Normally distributed random numbers.

    Args:
        mean: the mean (default 0.0); per-sample argument input allowed.
        stddev: the standard deviation (default 1.0, >= 0); argument input allowed.
        shape: output shape per sample (default: a scalar, or the input's shape).
        dtype: FLOAT (default) or another numeric type (integers round and saturate).
        seed: the operator's own seed.

    Example:
        >>> with pipe:
        ...     noise = fn.random.normal(images, stddev=5.0)
    """

    schema = "random.normal"
    light = True
    arg_inputs = frozenset({"mean", "stddev", "shape"})
    _base = "normal"

    def setup(self, *, mean=0.0, stddev=1.0, shape=None, dtype=None) -> None:
        self.mean = float(mean)
        self.stddev = self._check_std(stddev)
        self._setup_base(shape, dtype, DALIDataType.FLOAT)

    def _check_std(self, s) -> float:
        if np.ndim(s) or not float(s) >= 0:
            raise ArgumentError(f"{self.schema}: stddev={s!r} must be a number >= 0")
        return float(s)

    def run_batch(self, inputs, args, params, stream):
        """GPU; see the module docstring for when the numbers are drawn on the GPU."""
        if inputs and not args and self.dtype in (np.float32, np.float64):
            return self._draw_on_gpu(inputs[0], params, stream)
        return super().run_batch(inputs, args, params, stream)

    def _draw_on_gpu(self, like, params, stream):
        """Normal numbers in the shapes of ``like`` (a SampleList), one cuRAND call for the
        whole batch into its output buffer (the alignment padding between samples is drawn
        too and never read)."""
        import cupy

        out = alloc_batch(like.shapes, self.dtype, like.device_id)
        if len(out) == 0:
            return out
        owner = out.dense if out.dense is not None else out.owners
        flat = owner.reshape(-1)
        if flat.dtype != self.dtype:  # the uint8 buffer of a ragged batch (256-byte aligned)
            flat = flat.view(self.dtype)
        with cupy.cuda.Device(like.device_id), stream:
            if self.stddev == 0:
                flat.fill(self.mean)
                return out
            curand = cupy.cuda.curand
            gen = getattr(self, "_curand", None)
            if gen is None:  # Philox: counter-based, so seeding anew each batch costs nothing
                philox = curand.CURAND_RNG_PSEUDO_PHILOX4_32_10
                gen = self._curand = cupy.random.RandomState(int(params[0][1]), method=philox)
            else:
                gen.seed(int(params[0][1]))
            handle = getattr(gen, "_generator", None)
            if handle is not None and flat.size % 2 == 0:
                # the call ``gen.normal`` makes for an even count (cuRAND's normal generators
                # take even counts only), into the output: the same numbers without its
                # temporary array and the copy kernel of ``flat[...] = ...`` (a ragged
                # batch's buffer is 256-byte aligned samples: always an even count)
                draw = (
                    curand.generateNormal
                    if self.dtype == np.float32
                    else curand.generateNormalDouble
                )
                draw(handle, flat.data.ptr, flat.size, self.mean, self.stddev)
            else:
                flat[...] = gen.normal(self.mean, self.stddev, flat.size, dtype=self.dtype)
        return out

    def run_sample(self, inputs, args, param):
        z = self._sample_base(inputs, args, param)
        mean = _scalar(args["mean"]) if "mean" in args else self.mean
        std = self._check_std(_scalar(args["stddev"])) if "stddev" in args else self.stddev
        if mean == 0.0 and std == 1.0:  # the standard normal (the dither's): no arithmetic
            return self._to_dtype(np.asarray(z))
        return self._to_dtype(np.asarray(mean + std * z))
