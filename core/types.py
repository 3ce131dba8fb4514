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
