"""Batches as they leave a pipeline: :class:`TensorListCPU` (and the per-sample
:class:`TensorCPU`). The GPU counterparts live in ``tensors_gpu.py`` and load with CuPy.

A dense batch (every sample the same shape) converts to one array zero-copy where it already is
one, and to frameworks through ``__dlpack__``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from .errors import PipelineError
from .types import DALIDataType, to_dali_dtype


class TensorCPU:
    """One sample of a CPU batch; a view that shares memory with the batch."""

    def __init__(self, array: np.ndarray, layout: str = "", source_info: str = ""):
        self._array = array
        self._layout = layout
        self._source_info = source_info

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def layout(self) -> str:
        return self._layout

    def source_info(self) -> str:
        return self._source_info

    @property
    def dtype(self) -> DALIDataType:
        return to_dali_dtype(self._array.dtype)

    def as_array(self) -> np.ndarray:
        return self._array

    def ndim(self) -> int:
        return self._array.ndim

    def copy_to_external(self, ptr, use_copy_kernel: bool = False) -> None:
        """Copy the data (C order) to host memory at ``ptr`` (an int or ``ctypes.c_void_p``),
        which must hold ``nbytes`` bytes, as DALI's ``TensorCPU.copy_to_external``."""
        _copy_to_host(ptr, [self._array])

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)

    def __dlpack__(self, stream=None, **kwargs):
        return self._array.__dlpack__(**kwargs) if kwargs else self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    def __repr__(self) -> str:
        return f"TensorCPU(shape={self.shape()}, dtype={self.dtype.name}, layout={self._layout!r})"


class TensorListCPU:
    """A batch of CPU samples.

    Args:
        data: a list of numpy arrays (one per sample) or one array whose first axis is the batch.
        layout: layout of each sample, e.g. ``"HWC"``.
        source_info: per-sample origin (the file path for reader outputs).
    """

    def __init__(
        self,
        data: Sequence[np.ndarray] | np.ndarray,
        layout: str = "",
        source_info: Sequence[str] | None = None,
    ):
        if isinstance(data, np.ndarray | np.generic):
            data = np.asarray(data)
            if data.ndim == 0:
                raise ValueError("TensorListCPU: a 0-dim array has no batch axis")
            self._dense: np.ndarray | None = data
            self._samples = [data[i, ...] for i in range(len(data))]  # 0-d rows stay arrays
        else:
            self._dense = None
            self._samples = [np.asarray(x) for x in data]
            dtypes = {x.dtype for x in self._samples}
            if len(dtypes) > 1:
                raise TypeError(
                    f"TensorListCPU: samples have mixed dtypes {sorted(map(str, dtypes))}"
                )
        self._layout = layout
        self._source_info = list(source_info) if source_info is not None else [""] * len(self)

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, i: int) -> TensorCPU:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample index {i} out of range for a batch of {n}")
        i %= n
        return TensorCPU(self._samples[i], self._layout, self._source_info[i])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def at(self, i: int) -> np.ndarray:
        """Sample ``i`` as a numpy array (a view)."""
        return np.asarray(self[i].as_array())

    def shape(self) -> list[tuple[int, ...]]:
        return [tuple(x.shape) for x in self._samples]

    def ndim(self) -> int:
        return self._samples[0].ndim if self._samples else 0

    def layout(self) -> str:
        return self._layout

    def set_layout(self, layout: str) -> None:
        self._layout = layout

    @property
    def dtype(self) -> DALIDataType:
        if self._dense is not None:
            return to_dali_dtype(self._dense.dtype)
        if not self._samples:
            return DALIDataType.NO_TYPE
        return to_dali_dtype(self._samples[0].dtype)

    def source_info(self, i: int) -> str:
        return self._source_info[i]

    def is_dense_tensor(self) -> bool:
        """True when every sample has the same shape (the batch fits one array)."""
        if self._dense is not None:
            return True
        return len({x.shape for x in self._samples}) <= 1

    def as_array(self) -> np.ndarray:
        """The batch as one array of shape (N, *sample_shape); samples must have equal shapes."""
        if self._dense is None:
            if not self.is_dense_tensor():
                raise PipelineError(
                    "Tensors in the list must have the same shape: got "
                    f"{sorted(set(self.shape()))[:4]}"
                )
            self._dense = np.stack(self._samples) if self._samples else np.empty((0,))
            self._samples = list(self._dense)
        return self._dense

    def as_tensor(self) -> TensorCPU:
        """The whole batch as one tensor of shape (N, *sample_shape), sharing its memory (DALI's
        ``as_tensor``: ``.shape()`` is a list, ``.dtype`` a ``DALIDataType``; ``np.asarray``
        and DLPack give the array). Samples must have equal shapes; ``as_array()`` gives the
        numpy array directly."""
        layout = "N" + self._layout if self._layout else ""
        return TensorCPU(self.as_array(), layout)

    def copy_to_external(self, ptr, use_copy_kernel: bool = False) -> None:
        """Copy every sample, one after the other (C order), to host memory at ``ptr`` (an int
        or ``ctypes.c_void_p``), as DALI's ``TensorListCPU.copy_to_external``. The samples may
        differ in shape."""
        _copy_to_host(ptr, [self._dense] if self._dense is not None else self._samples)

    def as_cpu(self) -> TensorListCPU:
        return self

    def __dlpack__(self, stream=None, **kwargs):
        arr = self.as_array()
        return arr.__dlpack__(**kwargs) if kwargs else arr.__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU

    def __repr__(self) -> str:
        return f"TensorListCPU(len={len(self)}, dtype={self.dtype.name}, layout={self._layout!r})"


class _LazyGpuClass(type):
    """Metaclass of the GPU class stand-ins below: ``dlpipe.tensors.TensorListGPU`` imports
    without CuPy; ``isinstance`` is answered by the real class once ``tensors_gpu`` is loaded
    (nothing can be an instance before), and calling it builds the real class (which needs
    CuPy)."""

    def _real(cls):
        from . import tensors_gpu  # imports cupy: MissingExtraError-worthy when absent

        return getattr(tensors_gpu, cls.__name__)

    def __instancecheck__(cls, obj) -> bool:
        import sys

        mod = sys.modules.get(__package__ + ".tensors_gpu")
        return mod is not None and isinstance(obj, getattr(mod, cls.__name__))

    def __subclasscheck__(cls, sub) -> bool:
        import sys

        mod = sys.modules.get(__package__ + ".tensors_gpu")
        return mod is not None and issubclass(sub, getattr(mod, cls.__name__))

    def __call__(cls, *args, **kwargs):
        from .errors import require_extra

        require_extra("cupy", "cuda13")
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name):
        if name.startswith("__"):  # introspection (inspect, pickle, doctest) must not load CuPy
            raise AttributeError(name)
        return getattr(cls._real(), name)


class TensorListGPU(metaclass=_LazyGpuClass):
    """A batch of GPU samples (``tensors_gpu.TensorListGPU``; needs CuPy to be made)."""


class TensorGPU(metaclass=_LazyGpuClass):
    """One GPU sample (``tensors_gpu.TensorGPU``; needs CuPy to be made)."""


def _address(ptr) -> int:
    """An address from an int, a ``ctypes.c_void_p`` or another ctypes pointer."""
    if isinstance(ptr, ctypes.c_void_p):
        return int(ptr.value or 0)
    if isinstance(ptr, ctypes._Pointer):
        return ctypes.cast(ptr, ctypes.c_void_p).value or 0
    return int(ptr)


def _copy_to_host(ptr, arrays: Sequence[np.ndarray]) -> None:
    dst = _address(ptr)
    if dst == 0 and any(a.nbytes for a in arrays):
        raise PipelineError("copy_to_external: the destination pointer is NULL")
    for a in arrays:
        a = np.ascontiguousarray(a)
        if a.nbytes:
            ctypes.memmove(dst, a.ctypes.data, a.nbytes)
        dst += a.nbytes
