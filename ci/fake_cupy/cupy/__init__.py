"""A stand-in for CuPy that runs without a GPU, for timing the GPU stage's host work
(``ci/gpu_host_model.py``): arrays carry metadata only (shape, dtype, strides, a made-up device
address), kernels, copies and allocations are counted in :data:`COUNTS`, nothing is computed.

Only on ``sys.path`` when that script puts it there; never imported by dlpipe or its tests.
"""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np

COUNTS: collections.Counter = collections.Counter()
_ADDRESSES = itertools.count(1 << 32, 1 << 20)

float16, float32, float64 = np.float16, np.float32, np.float64
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
bool_ = np.bool_


class _Pointer:
    def __init__(self, ptr: int, mem=None):
        self.ptr = ptr
        self.mem = mem

    def __add__(self, offset: int) -> _Pointer:  # (CuPy's MemoryPointer + bytes)
        return _Pointer(self.ptr + int(offset), self.mem)


class _Device:
    def __init__(self, i: int | None = 0):
        self.id = 0 if i is None else i

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self) -> None:
        pass


class _Flags:
    def __init__(self, c: bool):
        self.c_contiguous = c


class ndarray:
    """Metadata of a device array."""

    def __init__(self, shape, dtype=np.float32, memptr=None, strides=None):
        shape = shape if isinstance(shape, tuple | list) else (shape,)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.ndim = len(self.shape)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.itemsize
        c, acc = [], self.itemsize
        for s in reversed(self.shape):
            c.append(acc)
            acc *= s
        c = tuple(reversed(c))
        self.strides = tuple(strides) if strides is not None else c
        self.data = memptr if memptr is not None else _Pointer(next(_ADDRESSES))
        self.device = _Device(0)
        self.flags = _Flags(self.strides == c)

    def set(self, host, stream=None) -> None:
        COUNTS["h2d"] += 1

    def get(self, stream=None):
        COUNTS["d2h"] += 1
        return np.zeros(self.shape, self.dtype)

    def _shadow(self):
        return np.lib.stride_tricks.as_strided(np.zeros(1, self.dtype), self.shape, [0] * self.ndim)

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = shape[0]
        return ndarray(self._shadow().reshape(shape).shape, self.dtype, self.data)

    def __getitem__(self, index):
        return ndarray(self._shadow()[index].shape, self.dtype, _Pointer(self.data.ptr))

    def __setitem__(self, index, value) -> None:
        COUNTS["setitem"] += 1

    def fill(self, value) -> None:
        COUNTS["memset"] += 1

    def astype(self, dtype, copy=True):
        return ndarray(self.shape, dtype)

    def copy(self):
        COUNTS["copy"] += 1
        return ndarray(self.shape, self.dtype)

    def view(self, dtype):
        return ndarray(self.shape, dtype, self.data)

    def __len__(self) -> int:
        return self.shape[0]

    def _binary(self, other):
        COUNTS["array_op"] += 1
        return ndarray(np.broadcast_shapes(self.shape, getattr(other, "shape", ())), self.dtype)

    __add__ = __sub__ = __mul__ = __truediv__ = __radd__ = __rsub__ = __rmul__ = _binary

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.data.ptr, False),
                "strides": self.strides, "version": 3}  # fmt: skip


def empty(shape, dtype=np.float32, order="C"):
    COUNTS["empty"] += 1
    return ndarray(shape, dtype)


def zeros(shape, dtype=np.float32):
    COUNTS["memset"] += 1
    return empty(shape, dtype)


def full(shape, value, dtype=np.float32):
    return zeros(shape, dtype)


def empty_like(a, dtype=None):
    return empty(a.shape, dtype or a.dtype)


def zeros_like(a, dtype=None):
    return zeros(a.shape, dtype or a.dtype)


def asarray(x, dtype=None):
    if isinstance(x, ndarray):
        return x if dtype is None or np.dtype(dtype) == x.dtype else x.astype(dtype)
    a = np.asarray(x, dtype)
    COUNTS["h2d"] += 1
    return empty(a.shape, a.dtype)


array = asarray


def ascontiguousarray(x, dtype=None):
    if x.flags.c_contiguous and (dtype is None or np.dtype(dtype) == x.dtype):
        return x
    COUNTS["copy_kernel"] += 1
    return empty(x.shape, dtype or x.dtype)


def stack(arrays, axis=0):
    arrays = list(arrays)
    COUNTS["copy_kernel"] += 1
    return empty((len(arrays), *arrays[0].shape), arrays[0].dtype)


def asnumpy(x, stream=None):
    COUNTS["d2h"] += 1
    return np.zeros(x.shape, x.dtype)


def where(c, a, b):
    COUNTS["array_op"] += 1
    return ndarray(c.shape, getattr(a, "dtype", np.float32))


def cumsum(a, axis=None):
    COUNTS["array_op"] += 1
    return ndarray(a.shape, a.dtype)


class _Kernel:
    def __init__(self, name: str):
        self.name = name

    def __call__(self, grid, block, args, shared_mem=0, stream=None) -> None:
        COUNTS["launch"] += 1
        COUNTS["launch:" + self.name] += 1


class RawModule:
    def __init__(self, code=None, options=(), name_expressions=None, **kwargs):
        COUNTS["compile"] += 1

    def get_function(self, name: str) -> _Kernel:
        return _Kernel(name)


class RawKernel(_Kernel):
    def __init__(self, code, name, options=(), **kwargs):
        COUNTS["compile"] += 1
        super().__init__(name)


class ElementwiseKernel:
    def __init__(self, in_params, out_params, operation, name="elementwise", **kwargs):
        COUNTS["compile"] += 1
        self.name = name

    def __call__(self, *args, size=None, **kwargs) -> None:
        COUNTS["launch"] += 1
        COUNTS["launch:" + self.name] += 1


class _RandomState:
    """``cupy.random.RandomState``: draws count as one kernel."""

    def __init__(self, seed=None, method=None):
        self._generator = 1  # (a cuRAND generator handle: ``cuda.curand.generate*``)

    def seed(self, seed=None) -> None:
        pass

    def normal(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
        COUNTS["launch"] += 1
        COUNTS["launch:curand_normal"] += 1
        return ndarray(size if size is not None else (), dtype)


class random:  # noqa: N801 (a module in CuPy)
    RandomState = _RandomState


class fft:  # noqa: N801 (a module in CuPy)
    @staticmethod
    def rfft(a, n=None, axis=-1):
        COUNTS["launch"] += 1
        COUNTS["launch:cufft_r2c"] += 1
        shape = list(a.shape)
        shape[axis] = (n or shape[axis]) // 2 + 1
        return ndarray(tuple(shape), np.complex64)


def from_dlpack(x):
    raise NotImplementedError("the fake CuPy has no DLPack")


from . import cuda  # noqa: E402,F401
