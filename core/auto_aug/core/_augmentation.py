"""The :class:`Augmentation` wrapper (what ``@augmentation`` makes) and signed magnitude bins.

An augmentation is a function ``op(data, parameter, **extra)`` built from dlpipe operators,
plus how to turn a magnitude bin into its parameter: the magnitudes are
``linspace(mag_range[0], mag_range[1], num_magnitude_bins)`` (or an explicit array), the bin
picks one, ``randomly_negate`` flips its sign per sample, and ``mag_to_param`` maps it to the
parameter. All parameters are computed once, when the graph is built, into a constant node
(``param_device``: "cpu", "gpu" or "auto", the data's device); each sample indexes it with its
bin (``2 * bin + sign`` when signs are random), so nothing but an index is computed per sample.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import fn, types
from ...errors import ArgumentError
from ...graph import DataNode
from ._args import (
    MissingArgException,
    filter_extra_accepted_kwargs,
    get_missing_kwargs,
    get_num_positional_args,
)

__all__ = ["Augmentation", "signed_bin"]


class _UndefinedParam:
    """Default of :meth:`Augmentation.augmentation`'s arguments: "keep the current value" (so
    that ``None`` can be passed on purpose)."""


class _SignedMagnitudeBin:
    """A magnitude bin (an int or a per-sample node) with a per-sample random sign.

    ``signed_magnitude_idx = 2 * bin + sign`` indexes the table of signed parameters (entry
    ``2k`` is magnitude ``k``, ``2k + 1`` its negation). It is computed when this object is
    made, so made before a conditional split it is computed once for the whole batch.
    """

    def __init__(self, magnitude_bin, random_sign: DataNode, signed_magnitude_idx: DataNode):
        self._magnitude_bin = magnitude_bin
        self._random_sign = random_sign
        self._signed_magnitude_idx = signed_magnitude_idx

    def __getitem__(self, idx: int) -> _SignedMagnitudeBin:
        """The ``idx``-th of a vector of bins and signs (one per stage of a sequence of
        augmentations, drawn at once)."""
        magnitude_bin = self._magnitude_bin
        if not isinstance(magnitude_bin, int):
            magnitude_bin = magnitude_bin[idx]
        return type(self)(magnitude_bin, self._random_sign[idx], self._signed_magnitude_idx[idx])

    @classmethod
    def create_from_bin(cls, magnitude_bin, random_sign=None, seed=None, shape=None):
        if not isinstance(magnitude_bin, int | DataNode) or isinstance(magnitude_bin, bool):
            raise ArgumentError(
                "The `magnitude_bin` must be an int or _DataNode (output of DALI op or "
                "`types.Constant`) representing batch of ints from "
                f"`[0..num_magnitude_bins-1]` range. Got {magnitude_bin} instead."
            )
        if random_sign is not None and (seed is not None or shape is not None):
            raise ArgumentError(
                "The `random_sign` cannot be specified together with neither `seed` nor `shape`."
            )
        if random_sign is None:
            random_sign = fn.random.uniform(
                values=[0, 1], dtype=types.INT32, seed=seed, shape=shape
            )
        return cls(magnitude_bin, random_sign, 2 * magnitude_bin + random_sign)

    @staticmethod
    def _remap_to_signed_magnitudes(magnitudes) -> np.ndarray:
        """``[m0, -m0, m1, -m1, ...]``: the table ``signed_magnitude_idx`` indexes."""
        out = []
        for m in magnitudes:
            out += [m, -m]
        return np.array(out)

    @property
    def bin(self):
        return self._magnitude_bin

    @property
    def random_sign(self) -> DataNode:
        return self._random_sign

    @property
    def signed_magnitude_idx(self) -> DataNode:
        return self._signed_magnitude_idx


def signed_bin(magnitude_bin, random_sign=None, seed=None, shape=None) -> _SignedMagnitudeBin:
    """Combine a magnitude bin with a random sign, once for the whole batch.

    An augmentation declared with ``randomly_negate=True`` draws a sign itself when given a
    plain bin (and warns); drawing it before a conditional split, with this function, does it
    once for the batch instead of once per branch.

    Args:
        magnitude_bin: an int or a per-sample node of ints in ``[0, num_magnitude_bins - 1]``.
        random_sign: a per-sample node of 0 / 1 (1: negate); drawn when not given.
        seed: the seed of the drawn sign.
        shape: the shape of the drawn sign (one per stage of a sequence of augmentations).

    Example:
        >>> mag = signed_bin(fn.random.uniform(values=list(range(31)), dtype=types.INT32))
        >>> images = augmentations.rotate(images, magnitude_bin=mag, num_magnitude_bins=31)
    """
    return _SignedMagnitudeBin.create_from_bin(magnitude_bin, random_sign, seed, shape)


def _np_wrap(magnitude):
    return np.array(magnitude)


def _contains_data_node(obj) -> bool:
    if isinstance(obj, list | tuple):
        return any(_contains_data_node(x) for x in obj)
    return isinstance(obj, DataNode)


def _conditional_call(op: Callable) -> Callable:
    """The user's op, with its ``if`` on DataNodes rewritten as in a conditionals pipeline
    (DALI converts the code the automatic augmentations call); dlpipe's own ops unchanged."""
    from ..._ast_rewrite import call

    return call(op)


class Augmentation:
    """A transformation for the automatic augmentations; made by ``@augmentation``.

    Calling it, ``aug(data, magnitude_bin=..., num_magnitude_bins=..., **kwargs)``, applies
    ``op(data, param, **extra)`` where ``param = mag_to_param(magnitudes[bin] * (-1) ** sign)``
    and ``extra`` are the entries of ``kwargs`` that ``op`` names.
    """

    def __init__(
        self,
        op: Callable[..., DataNode],
        mag_range=None,
        randomly_negate: bool | None = None,
        mag_to_param: Callable | None = None,
        param_device: str | None = None,
        name: str | None = None,
    ):
        self._op = op
        self._mag_range = mag_range
        self._randomly_negate = randomly_negate
        self._mag_to_param = mag_to_param
        self._param_device = param_device
        self._name = name
        if param_device not in (None, "cpu", "gpu", "auto"):
            raise ArgumentError(
                f"The `param_device` must be one of 'cpu', 'gpu', 'auto', got {param_device!r}."
            )
        n = get_num_positional_args(op)
        if n <= 1:
            raise ArgumentError(
                f"The {op} accepts {n} positional argument(s), but the functions decorated "
                "with `@augmentation` must accept at least two positional arguments: the "
                f"samples and parameters.\nError in: {self}."
            )

    def __repr__(self) -> str:
        params = [f"{k}={v!r}" for k, v in self._get_config().items() if v is not None]
        return f"Augmentation({', '.join([repr(self.op), *params])})"

    def __call__(self, data: DataNode, *, magnitude_bin=None, num_magnitude_bins=None, **kwargs):
        """Apply the augmentation to a batch.

        Args:
            data: the batch.
            magnitude_bin: an int, a per-sample node of ints, or a :func:`signed_bin`.
            num_magnitude_bins: the number of bins the magnitude range is divided into.
            **kwargs: extra arguments; those the op names are passed to it (``shape``,
                ``fill_value``, ``interp_type``, ...).

        Raises:
            MissingArgException: the op needs a keyword argument that is not in ``kwargs``.
        """
        param_device = self._infer_param_device(data)
        param = self._get_param(magnitude_bin, num_magnitude_bins, param_device)
        op_kwargs = filter_extra_accepted_kwargs(self.op, kwargs, 2)
        self._check_missing(kwargs)
        return _conditional_call(self.op)(data, param, **op_kwargs)

    # --- warps by a matrix (``augmentations._warp_by``), fused by ``select`` -------------------
    def warp_settings(self, kwargs: dict) -> tuple | None:
        """For an op that warps by a matrix (``"affine"``) or the rotation keeping the size
        (``"rotate"``): ``(kind, fill_value, interp_type)`` it would warp with, given the
        call's ``kwargs``; None for any other op."""
        if getattr(self.op, "warp_matrix", None) is not None:
            kind = "affine"
        elif getattr(self.op, "warp_rotate", False):
            kind = "rotate"
        else:
            return None
        defaults = inspect.signature(self.op).parameters
        extra = filter_extra_accepted_kwargs(self.op, kwargs, 2)
        if kind == "rotate" and not extra.get(
            "rotate_keep_size", defaults["rotate_keep_size"].default
        ):
            return None
        signed = isinstance(kwargs.get("magnitude_bin"), _SignedMagnitudeBin)
        if kind == "rotate" and self.randomly_negate and not signed:
            return None  # its sign is drawn in its own branch (_param_index): not fused
        fill = extra.get("fill_value", defaults["fill_value"].default)
        interp = extra.get("interp_type", defaults["interp_type"].default)
        return kind, fill, interp

    def warp_param(self, data, *, magnitude_bin=None, num_magnitude_bins=None, **kwargs):
        """The parameter node the op would get (the rotation's angle), as :meth:`__call__`
        computes it."""
        param = self._get_param(magnitude_bin, num_magnitude_bins, self._infer_param_device(data))
        self._check_missing(kwargs)
        return param

    def warp_matrix(self, data, *, magnitude_bin=None, num_magnitude_bins=None, **kwargs):
        """The matrix node the op would warp ``data`` with (what :meth:`__call__` computes
        before the ``warp_affine``), for an op that :meth:`warp_settings` describes.

        Raises:
            MissingArgException: as :meth:`__call__`.
        """
        param_device = self._infer_param_device(data)
        param = self._get_param(magnitude_bin, num_magnitude_bins, param_device)
        self._check_missing(kwargs)
        extra = filter_extra_accepted_kwargs(self.op, kwargs, 2)
        extra.pop("fill_value", None)
        extra.pop("interp_type", None)
        return self.op.warp_matrix(param, **extra)

    # --- value-wise maps (``augmentations._lookup_by``), fused by ``select`` ------------------
    def lookup_table(self, magnitude_bin=None, num_magnitude_bins=None) -> np.ndarray | None:
        """For an op that maps each uint8 value on its own: its tables, one 256-value row per
        row of :meth:`_param_rows` (made when the graph is built); None for any other op, or
        parameters that are not one value each (a custom ``mag_to_param``)."""
        table = getattr(self.op, "point_table", None)
        if table is None:
            return None
        try:
            rows = self._param_rows(magnitude_bin, num_magnitude_bins)
        except ArgumentError:  # the op's own call tells what is wrong
            return None
        if rows is None:
            return np.asarray(table(None))[None]
        if rows.ndim != 1:
            return None
        tables = np.stack([np.asarray(table(r)) for r in rows])
        return tables if tables.dtype == np.uint8 and tables.shape[1:] == (256,) else None

    def lookup_row(self, magnitude_bin=None, num_magnitude_bins=None):
        """Each sample's row of :meth:`lookup_table`: a node, or an int for every sample."""
        if self._get_magnitudes(num_magnitude_bins) is None:
            return 0
        return self._param_index(magnitude_bin)

    def _check_missing(self, kwargs: dict) -> None:
        missing = get_missing_kwargs(self.op, kwargs, 2)
        if missing:
            raise MissingArgException(
                f"The augmentation `{self.name}` requires following named argument(s) which "
                f"were not provided to the call: {', '.join(missing)}. Please make sure to pass "
                "the required arguments when calling the augmentation.",
                augmentation=self,
                missing_args=missing,
            )

    # --- configuration ------------------------------------------------------------------------
    @property
    def op(self) -> Callable:
        return self._op

    @property
    def mag_range(self):
        return self._mag_range

    @property
    def mag_to_param(self) -> Callable:
        return self._mag_to_param or _np_wrap

    @property
    def randomly_negate(self) -> bool:
        return self._randomly_negate or False

    @property
    def param_device(self) -> str:
        return self._param_device or "cpu"

    @property
    def name(self) -> str:
        return self._name or self.op.__name__

    def augmentation(
        self,
        mag_range: Any = _UndefinedParam,
        randomly_negate: Any = _UndefinedParam,
        mag_to_param: Any = _UndefinedParam,
        param_device: Any = _UndefinedParam,
        name: Any = _UndefinedParam,
        augmentation_cls=None,
    ) -> Augmentation:
        """A new augmentation of the same op with some settings changed (the others kept).

        Example:
            >>> stronger_shear = augmentations.shear_x.augmentation(mag_range=(0, 0.5))
        """
        config = self._get_config()
        for key, value in dict(
            mag_range=mag_range,
            randomly_negate=randomly_negate,
            mag_to_param=mag_to_param,
            param_device=param_device,
            name=name,
        ).items():
            if value is not _UndefinedParam:
                config[key] = value
        return (augmentation_cls or type(self))(self.op, **config)

    def _get_config(self) -> dict:
        return {
            "mag_range": self._mag_range,
            "mag_to_param": self._mag_to_param,
            "randomly_negate": self._randomly_negate,
            "param_device": self._param_device,
            "name": self._name,
        }

    # --- parameters ---------------------------------------------------------------------------
    def _infer_param_device(self, data) -> str:
        if self.param_device != "auto":
            return self.param_device
        return getattr(data, "device", None) or "cpu"

    def _has_custom_magnitudes(self) -> bool:
        return isinstance(self.mag_range, np.ndarray)

    def _map_mag_to_param(self, magnitude) -> np.ndarray:
        param = self.mag_to_param(magnitude)
        if _contains_data_node(param):
            raise ArgumentError(
                f"The `mag_to_param` callback of `{self.name}` augmentation returned "
                "`DataNode`, i.e. an output of a pipeline operator, which is not supported "
                "there. Instead, the `mag_to_param` callback must return parameter that is "
                "`np.ndarray` or is directly convertible to `np.ndarray`, so that the all "
                "parameters can be precomputed and reused across iterations.\n\n"
                f"Error in augmentation: {self}."
            )
        return np.array(param)

    def _map_mags_to_params(self, magnitudes) -> np.ndarray:
        params = [self._map_mag_to_param(m) for m in magnitudes]
        for param, mag in zip(params[1:], magnitudes[1:], strict=True):
            if param.shape != params[0].shape or param.dtype != params[0].dtype:
                raise ArgumentError(
                    f"The `mag_to_param` callback of `{self.name}` augmentation must return "
                    "the arrays of the same type and shape for different magnitudes. Got "
                    f"param of shape {params[0].shape} and {params[0].dtype} type for "
                    f"magnitude {magnitudes[0]}, but for magnitude {mag} the returned array "
                    f"has shape {param.shape} and type {param.dtype}.\n\n"
                    f"Error in augmentation: {self}."
                )
        return np.array(params)

    def _get_magnitudes(self, num_magnitude_bins):
        mag_range = self.mag_range
        if mag_range is None:
            return None
        if self._has_custom_magnitudes():
            if num_magnitude_bins is not None and len(mag_range) != num_magnitude_bins:
                raise ArgumentError(
                    f"The augmentation `{self.name}` has nd.array of length {len(mag_range)} "
                    "specified as the `mag_range`. However, the `num_magnitude_bins` passed "
                    f"to the call is {num_magnitude_bins}."
                )
            return mag_range
        if num_magnitude_bins is None:
            raise ArgumentError(
                f"The `num_magnitude_bins` argument is missing in the call of the "
                f"`{self.name}` augmentation. Please specify the `num_magnitude_bins` along "
                f"with the samples and magnitude_bin.\nError in augmentation: {self}."
            )
        if not hasattr(mag_range, "__len__") or len(mag_range) != 2:
            raise ArgumentError(
                "The `mag_range` must be a tuple of (low, high) ends of magnitude range or "
                f"nd.array of explicitly defined magnitudes. Got `{self.mag_range}` for "
                f"augmentation `{self.name}`."
            )
        lo, hi = mag_range
        return np.linspace(lo, hi, num_magnitude_bins, dtype=np.float32)

    def _get_param(self, magnitude_bin, num_magnitude_bins, param_device):
        rows = self._param_rows(magnitude_bin, num_magnitude_bins)
        if rows is None:
            return None
        index = self._param_index(magnitude_bin)
        if isinstance(index, int):
            return types.Constant(rows[index], device=param_device)
        return types.Constant(rows, device=param_device)[index]

    def _param_rows(self, magnitude_bin, num_magnitude_bins) -> np.ndarray | None:
        """The parameters the samples pick from, one row per choice (computed when the graph
        is built; no node is made): per signed magnitude (``2 * bin + sign``) when
        ``randomly_negate``, else per bin; one row when the bin is an int. None for an
        augmentation without magnitudes."""
        magnitudes = self._get_magnitudes(num_magnitude_bins)
        if magnitudes is None:
            return None
        if magnitude_bin is None:
            raise ArgumentError(
                f"The augmentation `{self.name}` has `mag_range` specified, so when called, "
                "it requires `magnitude_bin` parameter to select the magnitude from the "
                f"`mag_range`.\nError in augmentation: {self}."
            )
        b = magnitude_bin.bin if isinstance(magnitude_bin, _SignedMagnitudeBin) else magnitude_bin
        if self.randomly_negate:
            if isinstance(b, int):
                magnitudes = [magnitudes[b]]
            signed = _SignedMagnitudeBin._remap_to_signed_magnitudes(magnitudes)
            return self._map_mags_to_params(signed)
        if isinstance(b, int):
            return self._map_mag_to_param(magnitudes[b])[None]
        return self._map_mags_to_params(magnitudes)

    def _param_index(self, magnitude_bin):
        """Each sample's row of :meth:`_param_rows`: a node, or an int for every sample (a
        random sign is drawn here when ``randomly_negate`` gets an unsigned bin)."""
        if self.randomly_negate and not isinstance(magnitude_bin, _SignedMagnitudeBin):
            magnitude_bin = signed_bin(magnitude_bin)
            warnings.warn(
                f"The augmentation `{self.name}` was declared with `random_negate=True`, but "
                "unsigned `magnitude_bin` was passed to the augmentation call. The "
                "augmentation will randomly negate the magnitudes manually. However, for "
                "better performance, if you conditionally split batch between multiple "
                "augmentations, it is better to call `signed_magnitude_bin = "
                "signed_bin(magnitude_bin)` before the split and pass the signed bins instead.",
                Warning,
                stacklevel=4,
            )
        if self.randomly_negate:
            if isinstance(magnitude_bin.bin, int):
                return magnitude_bin.random_sign
            return magnitude_bin.signed_magnitude_idx
        b = magnitude_bin.bin if isinstance(magnitude_bin, _SignedMagnitudeBin) else magnitude_bin
        return 0 if isinstance(b, int) else b
