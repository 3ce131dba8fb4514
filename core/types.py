"""Data types, image types, interpolation types and layouts, spelled as in DALI's ``types``."""

from __future__ import annotations

import enum

import numpy as np


class DALIDataType(enum.IntEnum):
    NO_TYPE = -1
    UINT8 = 0
    UINT16 = 1
    UINT32 = 2
    UINT64 = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    FLOAT16 = 8
    FLOAT = 9
    FLOAT64 = 10
    BOOL = 11


class DALIImageType(enum.IntEnum):
    RGB = 0
    BGR = 1
    GRAY = 2
    YCbCr = 3
    ANY_DATA = 4


class DALIInterpType(enum.IntEnum):
    INTERP_NN = 0
    INTERP_LINEAR = 1
    INTERP_CUBIC = 2
    INTERP_LANCZOS3 = 3
    INTERP_TRIANGULAR = 4
    INTERP_GAUSSIAN = 5


# Module-level names, as DALI users write them: ``types.FLOAT``, ``types.RGB``, ...
globals().update({m.name: m for m in DALIDataType})
globals().update({m.name: m for m in DALIImageType})
globals().update({m.name: m for m in DALIInterpType})
DataType = DALIDataType
ImageType = DALIImageType
InterpType = DALIInterpType

# DALI's legacy layout constants name the sample layout (the batch axis is implicit):
# ``types.NCHW == "CHW"``, ``types.NHWC == "HWC"``.
NHWC, NCHW, NFHWC, NFCHW, SAME = "HWC", "CHW", "FHWC", "FCHW", ""

_TO_NUMPY = {
    DALIDataType.UINT8: np.uint8,
    DALIDataType.UINT16: np.uint16,
    DALIDataType.UINT32: np.uint32,
    DALIDataType.UINT64: np.uint64,
    DALIDataType.INT8: np.int8,
    DALIDataType.INT16: np.int16,
    DALIDataType.INT32: np.int32,
    DALIDataType.INT64: np.int64,
    DALIDataType.FLOAT16: np.float16,
    DALIDataType.FLOAT: np.float32,
    DALIDataType.FLOAT64: np.float64,
    DALIDataType.BOOL: np.bool_,
}
_FROM_NUMPY = {np.dtype(v): k for k, v in _TO_NUMPY.items()}


def to_numpy_dtype(dtype) -> np.dtype:
    """Convert a DALI data type, a numpy dtype or a dtype name to a numpy dtype."""
    if isinstance(dtype, DALIDataType):
        if dtype not in _TO_NUMPY:
            raise ValueError(f"{dtype=} has no numpy equivalent")
        return np.dtype(_TO_NUMPY[dtype])
    if isinstance(dtype, str) and dtype.upper() in DALIDataType.__members__:
        return to_numpy_dtype(DALIDataType[dtype.upper()])
    return np.dtype(dtype)


def to_dali_dtype(dtype) -> DALIDataType:
    """Convert a numpy dtype (or anything :func:`to_numpy_dtype` takes) to a DALI data type."""
    if isinstance(dtype, DALIDataType):
        return dtype
    return _FROM_NUMPY[to_numpy_dtype(dtype)]


def to_numpy_type(dali_type) -> type:
    """DALI's ``types.to_numpy_type``: the numpy scalar type of a DALI data type.

    Example:
        >>> to_numpy_type(DALIDataType.FLOAT)
        <class 'numpy.float32'>
    """
    if not isinstance(dali_type, DALIDataType) or dali_type not in _TO_NUMPY:
        raise KeyError(dali_type)
    return _TO_NUMPY[dali_type]


# Type names as numpy, torch and others print them (DALI's ``_type_name_to_dali_type``).
_NAME_TO_DALI = {
    "bool": DALIDataType.BOOL,
    "boolean": DALIDataType.BOOL,
    "int8": DALIDataType.INT8,
    "sbyte": DALIDataType.INT8,
    "uint8": DALIDataType.UINT8,
    "byte": DALIDataType.UINT8,
    "ubyte": DALIDataType.UINT8,
    "int16": DALIDataType.INT16,
    "short": DALIDataType.INT16,
    "uint16": DALIDataType.UINT16,
    "ushort": DALIDataType.UINT16,
    "int32": DALIDataType.INT32,
    "uint32": DALIDataType.UINT32,
    "int64": DALIDataType.INT64,
    "long": DALIDataType.INT64,
    "uint64": DALIDataType.UINT64,
    "ulong": DALIDataType.UINT64,
    "half": DALIDataType.FLOAT16,
    "float16": DALIDataType.FLOAT16,
    "float": DALIDataType.FLOAT,
    "float32": DALIDataType.FLOAT,
    "float64": DALIDataType.FLOAT64,
    "double": DALIDataType.FLOAT64,
}


def to_dali_type(framework_type) -> DALIDataType:
    """DALI's ``types.to_dali_type``: a numpy/torch dtype (or its name) as a DALI data type.

    Raises:
        TypeError: the type has no DALI equivalent.

    Example:
        >>> to_dali_type(np.uint8)
        <DALIDataType.UINT8: 0>
    """
    if isinstance(framework_type, DALIDataType):
        return framework_type
    if isinstance(framework_type, type) and issubclass(framework_type, np.generic):
        framework_type = np.dtype(framework_type)
    name = str(framework_type)
    if name.startswith("torch."):
        name = name[6:]
    t = _NAME_TO_DALI.get(name)
    if t is None:
        raise TypeError(f"'{framework_type}' could not be converted into any known DALIDataType.")
    return t


def to_image_type(value) -> DALIImageType:
    """Accept ``types.RGB``, ``"rgb"`` or an int; raise ValueError naming the value otherwise."""
    if isinstance(value, DALIImageType):
        return value
    if isinstance(value, str) and value.upper() in {"RGB", "BGR", "GRAY", "YCBCR", "ANY_DATA"}:
        return DALIImageType["YCbCr" if value.upper() == "YCBCR" else value.upper()]
    try:
        return DALIImageType(value)
    except ValueError:
        raise ValueError(
            f"output_type={value!r} is not an image type (RGB, BGR, GRAY, YCbCr, ANY_DATA)"
        ) from None


def to_interp_type(value) -> DALIInterpType:
    """Accept ``types.INTERP_LINEAR``, ``"linear"`` or an int."""
    if isinstance(value, DALIInterpType):
        return value
    if isinstance(value, str):
        key = value.upper()
        key = key if key.startswith("INTERP_") else "INTERP_" + key
        if key in DALIInterpType.__members__:
            return DALIInterpType[key]
    try:
        return DALIInterpType(value)
    except ValueError:
        raise ValueError(f"interp_type={value!r} is not an interpolation type") from None


class SampleInfo:
    """What a per-sample ``external_source`` callback gets (``batch=False``).

    Attributes:
        idx_in_epoch: index of the sample in the epoch.
        idx_in_batch: index of the sample in its batch.
        iteration: index of the batch in the epoch.
        epoch_idx: the epoch (starts at 0, +1 at each ``pipe.reset()`` after StopIteration).
    """

    __slots__ = ("idx_in_epoch", "idx_in_batch", "iteration", "epoch_idx")

    def __init__(self, idx_in_epoch: int, idx_in_batch: int, iteration: int, epoch_idx: int):
        self.idx_in_epoch = idx_in_epoch
        self.idx_in_batch = idx_in_batch
        self.iteration = iteration
        self.epoch_idx = epoch_idx

    def __repr__(self) -> str:
        return (
            f"SampleInfo(idx_in_epoch={self.idx_in_epoch}, idx_in_batch={self.idx_in_batch}, "
            f"iteration={self.iteration}, epoch_idx={self.epoch_idx})"
        )


class BatchInfo:
    """What a batch ``external_source`` callback gets with ``batch_info=True``."""

    __slots__ = ("iteration", "epoch_idx")

    def __init__(self, iteration: int, epoch_idx: int):
        self.iteration = iteration
        self.epoch_idx = epoch_idx

    def __repr__(self) -> str:
        return f"BatchInfo(iteration={self.iteration}, epoch_idx={self.epoch_idx})"


# --- constants (DALI's ``types.Constant`` / ``ScalarConstant``) ------------------------------

_INT_TYPES = (
    DALIDataType.INT8,
    DALIDataType.INT16,
    DALIDataType.INT32,
    DALIDataType.INT64,
    DALIDataType.UINT8,
    DALIDataType.UINT16,
    DALIDataType.UINT32,
    DALIDataType.UINT64,
)
_FLOAT_TYPES = (DALIDataType.FLOAT16, DALIDataType.FLOAT, DALIDataType.FLOAT64)
_INT_LIKE_TYPES = (DALIDataType.BOOL, *_INT_TYPES)


class ScalarConstant:
    """A scalar for expressions, with the type it takes part in type promotion as.

    Made by :func:`Constant` for a scalar value (no ``shape``, ``layout`` or ``device``). A
    Python ``bool``, ``int`` or ``float`` counts as BOOL, INT32 or FLOAT; a numpy scalar as its
    own type; ``dtype`` overrides both. Used in an expression it is folded into the
    expression's operator (no separate node).

    Example:
        >>> half = types.Constant(0.5, dtype=types.FLOAT16)
        >>> out = images * half        # float16 result for uint8 images
    """

    def __init__(self, value, dtype=None):
        self.shape = []
        value_dtype = getattr(value, "dtype", None)  # numpy scalars and 0-d arrays
        if value_dtype is not None:
            dali_type = to_dali_type(np.dtype(value_dtype))
            if dali_type in _INT_TYPES:
                value = int(value)
            elif dali_type in _FLOAT_TYPES:
                value = float(value)
            else:
                value = bool(value)
            if dtype is None:
                dtype = dali_type
        if not isinstance(value, bool | int | float):
            raise TypeError(
                f"Expected scalar value of type 'bool', 'int' or 'float', got {type(value)}."
            )
        if dtype is not None:
            dtype = to_dali_type(dtype) if not isinstance(dtype, DALIDataType) else dtype
            self.dtype = dtype
            if dtype == DALIDataType.BOOL:
                self.value = bool(value)
            elif dtype in _INT_TYPES:
                self.value = int(value)
            elif dtype in _FLOAT_TYPES:
                self.value = float(value)
            else:
                raise TypeError(
                    f"ScalarConstant can only hold one of: {[t.name for t in _TO_NUMPY]} types, "
                    f"got dtype={dtype!r}."
                )
        elif isinstance(value, bool):
            self.value, self.dtype = value, DALIDataType.BOOL
        elif isinstance(value, int):
            self.value, self.dtype = value, DALIDataType.INT32
        else:
            self.value, self.dtype = value, DALIDataType.FLOAT

    def _as(self, dtype: DALIDataType) -> ScalarConstant:
        return ScalarConstant(self.value, dtype)

    def bool(self):
        return self._as(DALIDataType.BOOL)

    def int8(self):
        return self._as(DALIDataType.INT8)

    def int16(self):
        return self._as(DALIDataType.INT16)

    def int32(self):
        return self._as(DALIDataType.INT32)

    def int64(self):
        return self._as(DALIDataType.INT64)

    def uint8(self):
        return self._as(DALIDataType.UINT8)

    def uint16(self):
        return self._as(DALIDataType.UINT16)

    def uint32(self):
        return self._as(DALIDataType.UINT32)

    def uint64(self):
        return self._as(DALIDataType.UINT64)

    def float16(self):
        return self._as(DALIDataType.FLOAT16)

    def float32(self):
        return self._as(DALIDataType.FLOAT)

    def float64(self):
        return self._as(DALIDataType.FLOAT64)

    # Comparing with a DataNode builds a graph node (the DataNode's reflected operator).
    def __eq__(self, other):
        if isinstance(other, ScalarConstant):
            return self.value == other.value and self.dtype == other.dtype
        return other.__eq__(self)

    def __ne__(self, other):
        if isinstance(other, ScalarConstant):
            return self.value != other.value or self.dtype != other.dtype
        return other.__ne__(self)

    # No arithmetic operators: ``Constant(2) * node`` falls through to ``node.__rmul__``.
    __hash__ = None

    def __bool__(self):
        if self.dtype in _INT_LIKE_TYPES:
            return bool(self.value)
        raise TypeError(
            "ScalarConstant must be converted to one of bool or int types explicitly before "
            "casting to builtin `bool`."
        )

    def __int__(self):
        if self.dtype in _INT_LIKE_TYPES:
            return int(self.value)
        raise TypeError(
            "ScalarConstant must be converted to one of bool or int types explicitly before "
            "casting to builtin `int`."
        )

    def __float__(self):
        if self.dtype in _FLOAT_TYPES:
            return self.value
        raise TypeError(
            "ScalarConstant must be converted to one of the float types explicitly before "
            "casting to builtin `float`."
        )

    def __str__(self):
        return f"{self.value}:{self.dtype}"

    def __repr__(self):
        return f"{self.value}"


def _is_array_like(value) -> bool:
    """numpy arrays and scalars, and framework tensors that convert to numpy (``__array__``)."""
    return isinstance(value, np.ndarray | np.generic) or (
        hasattr(value, "__array__") and not isinstance(value, bool | int | float | str)
    )


def _is_scalar_shape(shape) -> bool:
    return shape is None or shape in ((), [], 1, [1], (1,))


def Constant(value, dtype=None, shape=None, layout=None, device=None, **kwargs):  # noqa: N802
    """A constant for the graph: a :class:`ScalarConstant`, or a node of constant tensors.

    As in DALI: a scalar ``value`` with no ``shape``, ``layout``, ``device`` or other argument
    gives a :class:`ScalarConstant` (folded into expressions); anything else (a list, a tuple,
    a numpy array, or any of those arguments) adds an ``fn.constant`` node producing the same
    tensor for every sample. A numpy array gives the default ``shape`` and ``dtype`` (64-bit
    types are narrowed to 32 bits, as in DALI); a list gives FLOAT if it holds a float, else
    INT32 (BOOL for bools only).

    Args:
        value: a bool, int, float, a list/tuple of them, or an array.
        dtype: the element type (DALIDataType or numpy dtype).
        shape: the shape of each sample; a single value is broadcast to it.
        layout: the layout of each sample, e.g. ``"HWC"``.
        device: ``"cpu"`` or ``"gpu"`` for a constant node.
        **kwargs: passed on to ``fn.constant`` (``name``, ...).

    Example:
        >>> mean = types.Constant(np.float32([0.485, 0.456, 0.406]) * 255)
        >>> normalized = (images - mean) / 58.0
    """
    if (
        device is not None
        or (_is_array_like(value) and np.ndim(value) != 0)
        or isinstance(value, list | tuple)
        or not _is_scalar_shape(shape)
        or kwargs
        or layout is not None
    ):
        return _constant_node(value, dtype, shape, layout, device, **kwargs)
    return ScalarConstant(value, dtype)


def _constant_node(value, dtype, shape, layout, device, **kwargs):
    from . import fn

    if _is_array_like(value):
        arr = np.asarray(value)
        if arr.dtype == np.float64:  # DALI narrows 64-bit arrays
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64:
            arr = arr.astype(np.int32)
        elif arr.dtype == np.uint64:
            arr = arr.astype(np.uint32)
        actual = to_dali_type(arr.dtype)
        if shape is None:
            shape = list(arr.shape)
        else:
            arr = arr.reshape(shape)
        data = arr.reshape(-1).tolist()
    else:
        seq = list(value) if isinstance(value, list | tuple) else [value]
        if shape is None:
            shape = [len(value)] if isinstance(value, list | tuple) else []
        actual = _type_of_values(seq)
        data = seq if isinstance(value, list | tuple) else value
    if dtype is None:
        dtype = actual
    isint = actual in _INT_LIKE_TYPES
    if isint:
        idata, fdata = ([int(v) for v in data] if isinstance(data, list) else int(data)), None
    else:
        idata, fdata = None, data
    return fn.constant(
        device=device or "cpu",
        fdata=fdata,
        idata=idata,
        shape=shape,
        dtype=dtype,
        layout=layout,
        **kwargs,
    )


def _type_of_values(values) -> DALIDataType:
    has_float = has_int = False
    for x in values:
        if isinstance(x, bool):
            continue
        if isinstance(x, float):
            has_float = True
        elif isinstance(x, int):
            has_int = True
        else:
            raise TypeError("Unexpected type: " + str(type(x)))
    if has_float:
        return DALIDataType.FLOAT
    if has_int:
        return DALIDataType.INT32
    if values:
        return DALIDataType.BOOL
    return DALIDataType.FLOAT  # an empty list defaults to float, as in DALI
