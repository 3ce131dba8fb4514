"""GPU batches: :class:`SampleList` (what GPU operators pass between them), and the
user-facing :class:`TensorListGPU` / :class:`TensorGPU`. Imported only when CuPy is needed.

A batch lives on the device of the pipeline that made it. Its work was queued on the pipeline's
stream; a CUDA event recorded after the last kernel of the iteration marks it ready. Host-side
accessors (``at``, ``as_cpu``, ``as_tensor``, ``__cuda_array_interface__``) wait for that event;
``__dlpack__(stream=s)`` makes the consumer stream ``s`` wait on it instead, without blocking the
host. The memory of a batch belongs to its arrays (CuPy's pool or the decoder's images) and is
freed only when nothing refers to it any more, so a consumer holding a batch (or a tensor made
from it through DLPack) never sees it overwritten.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import cupy
import numpy as np

from .errors import PipelineError
from .tensors import TensorCPU, TensorListCPU
from .types import DALIDataType, to_dali_dtype

_INT64 = np.dtype(np.int64)


class SampleList:
    """A batch of device arrays, with per-sample pointers, shapes and strides as numpy arrays.

    Launchers read ``ptrs``/``shapes``/``strides`` (vectorised, no per-sample Python); indexing
    gives CuPy arrays (made on first access). ``dense`` is set when the samples are the
    consecutive slices of one contiguous array.

    Attributes:
        dtype: the element type (numpy dtype).
        ptrs: uint64 (N,) device addresses.
        shapes: int64 (N, ndim).
        strides: int64 (N, ndim), in elements.
        owners: what keeps the samples' memory alive: a list holds one object per sample;
            anything else (an array, a buffer, a tuple of them) is every sample's owner.
        dense: a CuPy array of shape (N, *sample_shape), or None.
    """

    # slots: the GPU stage makes ~50 a batch (no instance dict each: cheaper to make and to
    # read, and fewer objects for the garbage collector); ``_c_order`` and ``_row`` are the
    # marks of ``kernels._batch.c_contiguous`` and ``uniform_row``, set once found; ``_host``
    # a read-only numpy copy of a dense batch's values that the host made and uploaded (the
    # shapes: ``operators.shapes``), for operators that can then work on the host
    # (``kernels.layout.slice_known``)
    __slots__ = (
        "dtype",
        "ptrs",
        "shapes",
        "strides",
        "owners",
        "device_id",
        "dense",
        "_arrays",
        "_c_order",
        "_row",
        "_host",
        "__weakref__",
    )

    def __init__(
        self,
        dtype,
        ptrs,
        shapes,
        strides,
        owners: Any,
        device_id: int,
        dense=None,
        arrays: list | None = None,
    ):
        self.dtype = np.dtype(dtype)
        self.ptrs = np.asarray(ptrs, np.uint64)
        self.shapes = np.asarray(shapes, np.int64).reshape(len(self.ptrs), -1)
        self.strides = np.asarray(strides, np.int64).reshape(self.shapes.shape)
        self.owners = owners
        self.device_id = device_id
        self.dense = dense
        self._arrays = arrays

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def of_arrays(
        cls, dtype: np.dtype, ptrs, shapes, strides, owners: Any, device_id: int, dense=None
    ) -> SampleList:
        """The constructor for arrays already as the attributes hold them (``dtype`` a numpy
        dtype, ``ptrs`` uint64 (N,), ``shapes`` and ``strides`` int64 (N, ndim)): nothing is
        converted or checked. The GPU stage makes several per operator and batch."""
        self = cls.__new__(cls)
        self.dtype = dtype
        self.ptrs = ptrs
        self.shapes = shapes
        self.strides = strides
        self.owners = owners
        self.device_id = device_id
        self.dense = dense
        self._arrays = None
        return self

    @classmethod
    def from_dense(cls, arr) -> SampleList:
        """Samples ``arr[0], arr[1], ...`` of one C-contiguous CuPy array (a contiguous copy
        of ``arr`` when it is not)."""
        if not arr.flags.c_contiguous:
            arr = cupy.ascontiguousarray(arr)
        shape, strides = arr.shape, arr.strides
        shapes, strides, c_order, row = _dense_layout(shape, strides, arr.itemsize)
        # fresh arrays for every batch (copies of the memoised layout): nothing is shared; the
        # pointers in one ``arange`` (half an ``offsets + ptr``'s cost)
        n, step, ptr = shape[0], arr.strides[0], arr.data.ptr
        ptrs = (
            np.arange(ptr, ptr + n * step, step, dtype=np.uint64)
            if step > 0
            else np.full(n, ptr, np.uint64)  # (samples of no bytes, or one sample)
        )
        out = cls.of_arrays(
            arr.dtype, ptrs, shapes.copy(), strides.copy(), arr, arr.device.id, dense=arr
        )
        if c_order:  # (what ``kernels._batch.c_contiguous`` would find: it is not asked again)
            out._c_order = True
        out._row = row
        return out

    @classmethod
    def from_arrays(cls, arrays: Sequence, device_id: int | None = None) -> SampleList:
        """From CuPy arrays or objects with ``__cuda_array_interface__`` (one dtype and rank)."""
        arrays = list(arrays)
        if not arrays:
            dev = cupy.cuda.runtime.getDevice() if device_id is None else device_id
            return cls(np.uint8, [], np.zeros((0, 0)), np.zeros((0, 0)), [], dev, arrays=[])
        ptrs, shapes, strides, dtypes, keep = [], [], [], set(), []
        all_cupy = True
        for a in arrays:
            if isinstance(a, cupy.ndarray):
                dt = a.dtype
                ptrs.append(a.data.ptr)
                shapes.append(a.shape)
                strides.append(tuple(s // dt.itemsize for s in a.strides))
            else:
                all_cupy = False
                cai = a.__cuda_array_interface__
                dt = np.dtype(cai["typestr"])
                shp = tuple(cai["shape"])
                st = cai.get("strides")
                if st is None:
                    st = _contiguous_strides(shp, dt.itemsize)
                ptrs.append(cai["data"][0])
                shapes.append(shp)
                strides.append(tuple(s // dt.itemsize for s in st))
            dtypes.add(dt)
            keep.append(a)
        if len(dtypes) > 1:
            raise TypeError(f"a GPU batch must have one dtype, got {sorted(map(str, dtypes))}")
        if len({len(s) for s in shapes}) > 1:
            raise ValueError("a GPU batch must have one number of dimensions per sample")
        if device_id is None:
            device_id = (
                arrays[0].device.id
                if isinstance(arrays[0], cupy.ndarray)
                else cupy.cuda.runtime.getDevice()
            )
        return cls(
            dtypes.pop(), ptrs, shapes, strides, keep, device_id, arrays=keep if all_cupy else None
        )

    @classmethod
    def coerce(cls, x) -> SampleList:
        """A SampleList from a SampleList, a dense CuPy array or a list of CuPy arrays."""
        if isinstance(x, SampleList):
            return x
        if isinstance(x, TensorListGPU):
            return x._samples
        if isinstance(x, cupy.ndarray):
            return cls.from_dense(x)
        return cls.from_arrays(x)

    # --- the list protocol ----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.ptrs)

    def __getitem__(self, i: int):
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample index {i} out of range for a batch of {n}")
        i %= n
        if self.dense is not None:
            return self.dense[i]
        if self._arrays is None:
            self._arrays = [None] * n
        a = self._arrays[i]
        if a is None:
            a = self._make_array(i)
            self._arrays[i] = a
        return a

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def _make_array(self, i: int):
        shape = tuple(int(s) for s in self.shapes[i])
        strides = tuple(int(s) * self.dtype.itemsize for s in self.strides[i])
        extent = (
            1 + sum((s - 1) * st for s, st in zip(shape, strides, strict=True)) if all(shape) else 0
        )
        owner = self.owners[i] if isinstance(self.owners, list) else self.owners
        mem = cupy.cuda.UnownedMemory(
            int(self.ptrs[i]), max(extent, 1) + self.dtype.itemsize, owner, self.device_id
        )
        return cupy.ndarray(shape, self.dtype, cupy.cuda.MemoryPointer(mem, 0), strides)

    def take(self, indices: Sequence[int]) -> SampleList:
        """The samples ``indices`` (repeats allowed), as views of this batch's memory.

        Three ``take`` calls (a third of a 2-D fancy indexing's cost, the same rows) and no
        per-sample Python: the new batch keeps this one's owners alive as one object
        (per-sample owners, a list, become the single owner ``(list,)``), so the memory of every
        sample of this batch lives as long as any sample taken from it.
        """
        if not (isinstance(indices, np.ndarray) and indices.dtype == _INT64):
            indices = np.asarray(indices, np.int64)
        owners = self.owners
        if isinstance(owners, list):
            owners = (owners,)
        elif self.dense is not None:
            owners = self.dense
        out = SampleList.of_arrays(
            self.dtype,
            self.ptrs.take(indices),
            self.shapes.take(indices, axis=0),
            self.strides.take(indices, axis=0),
            owners,
            self.device_id,
        )
        row = getattr(self, "_row", None)  # (kernels._batch.uniform_row: the same answer)
        if row is not None and len(indices):
            out._row = row
        return out

    def is_uniform(self) -> bool:
        return len(self) == 0 or bool((self.shapes == self.shapes[0]).all())

    def shape_list(self) -> list[tuple[int, ...]]:
        return [tuple(int(v) for v in s) for s in self.shapes]

    def to_dense(self, stream=None):
        """One contiguous (N, ...) array (a copy unless already dense); samples must agree."""
        if self.dense is not None:
            return self.dense
        if not self.is_uniform():
            raise PipelineError(
                "Tensors in the list must have the same shape: got "
                f"{sorted(set(self.shape_list()))[:4]}"
            )
        with cupy.cuda.Device(self.device_id):
            out = cupy.empty((len(self), *self.shape_list()[0]) if len(self) else (0,), self.dtype)
            for i in range(len(self)):
                out[i] = self[i]
        return out


@functools.lru_cache(maxsize=1024)
def _dense_layout(shape: tuple, strides: tuple, itemsize: int) -> tuple:
    """(shapes, strides (N, ndim) int64 in elements, whether those strides are C strides,
    ``kernels._batch.uniform_row``) of the samples ``a[0], a[1], ...`` of a C-contiguous
    array, memoised per layout: the GPU stage wraps every operator's output this way, batch
    after batch (read-only: callers copy)."""
    n = shape[0]
    shapes = np.empty((n, len(shape) - 1), np.int64)
    shapes[:] = shape[1:]
    el_strides = np.empty_like(shapes)
    el_strides[:] = [s // itemsize for s in strides[1:]]
    for a in (shapes, el_strides):
        a.flags.writeable = False
    # whether the samples' strides are C strides (a dimension of 1 may have any stride in a
    # C-contiguous array): ``kernels._batch.c_contiguous``'s answer for these samples
    c_order, acc = True, 1
    for extent, stride in zip(shape[:0:-1], strides[:0:-1], strict=True):
        c_order = c_order and stride // itemsize == acc
        acc *= extent
    row = (tuple(shape[1:]), tuple(el_strides[0].tolist())) if n else None
    return shapes, el_strides, c_order, row


def _contiguous_strides(shape, itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def _wait(event, stream) -> None:
    """Make ``stream`` (a DLPack stream value) wait on ``event``; -1 means no synchronisation."""
    if event is None or stream == -1:
        return
    if stream is None or stream == 0:
        stream = 1  # the legacy default stream
    cupy.cuda.runtime.streamWaitEvent(int(stream), event.ptr)


class TensorGPU:
    """One GPU array with its readiness event: ``__cuda_array_interface__`` and DLPack."""

    def __init__(self, array, layout: str = "", event=None, source_info: str = ""):
        self._array = array
        self._layout = layout
        self._event = event
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

    def device_id(self) -> int:
        return self._array.device.id

    def data_ptr(self) -> int:
        return self._array.data.ptr

    def as_cupy(self):
        """The CuPy array, once the work that produced it has finished."""
        if self._event is not None:
            self._event.synchronize()
        return self._array

    def as_cpu(self):
        return TensorCPU(cupy.asnumpy(self.as_cupy()), self._layout, self._source_info)

    def ndim(self) -> int:
        return self._array.ndim

    def copy_to_external(self, ptr, cuda_stream=None, non_blocking: bool = False) -> None:
        """Copy the data (C order) to device memory at ``ptr`` (an int or
        ``ctypes.c_void_p``), as DALI's ``TensorGPU.copy_to_external``: on ``cuda_stream``
        (a stream object, a raw ``cudaStream_t`` or None: the producer's stream, which waits
        for the batch first), blocking the host until done unless ``non_blocking``."""
        _copy_to_device(ptr, [self._array], self._event, cuda_stream, non_blocking)

    @property
    def __cuda_array_interface__(self) -> dict:
        return self.as_cupy().__cuda_array_interface__

    def __dlpack__(self, stream=None, **kwargs):
        _wait(self._event, stream)
        return self._array.__dlpack__(stream=-1, **kwargs)

    def __dlpack_device__(self):
        return (2, self._array.device.id)  # kDLCUDA

    def __repr__(self) -> str:
        return f"TensorGPU(shape={self.shape()}, dtype={self.dtype.name}, layout={self._layout!r})"


class TensorListGPU:
    """A batch of GPU samples, as a pipeline returns it.

    Args:
        data: a :class:`SampleList`, one CuPy array whose first axis is the batch (or any object
            with ``__cuda_array_interface__``), or a list of CuPy arrays.
        layout: layout of each sample.
        event: CUDA event after which the data is ready (None: ready now).
        stream: the producer's stream.
        source_info: per-sample origin.

    Example:
        >>> images, = pipe.run()            # doctest: +SKIP
        >>> t = torch.from_dlpack(images)   # waits on the batch's event in torch's stream
    """

    def __init__(
        self,
        data,
        layout: str = "",
        event=None,
        stream=None,
        source_info: Sequence[str] | None = None,
        device_id: int = -1,
    ):
        if not isinstance(data, SampleList | cupy.ndarray | list | tuple) and hasattr(
            data, "__cuda_array_interface__"
        ):
            data = cupy.asarray(data)
        if isinstance(data, cupy.ndarray) and data.ndim == 0:
            raise ValueError("TensorListGPU: a 0-dim array has no batch axis")
        self._samples = SampleList.coerce(data)
        self._layout = layout or ""
        self._event = event
        self._stream = stream
        self._source_info = list(source_info) if source_info is not None else [""] * len(self)

    # --- sizes and metadata ---------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._samples)

    def shape(self) -> list[tuple[int, ...]]:
        return self._samples.shape_list()

    def ndim(self) -> int:
        return int(self._samples.shapes.shape[1]) if len(self) else 0

    def layout(self) -> str:
        return self._layout

    def set_layout(self, layout: str) -> None:
        self._layout = layout

    @property
    def dtype(self) -> DALIDataType:
        return to_dali_dtype(self._samples.dtype) if len(self) else DALIDataType.NO_TYPE

    @property
    def stream(self):
        return self._stream

    def device_id(self) -> int:
        return self._samples.device_id

    def source_info(self, i: int) -> str:
        return self._source_info[i]

    def is_dense_tensor(self) -> bool:
        """True when every sample has the same shape."""
        return self._samples.dense is not None or self._samples.is_uniform()

    def _ready(self) -> None:
        if self._event is not None:
            self._event.synchronize()

    # --- samples --------------------------------------------------------------------------
    def __getitem__(self, i: int) -> TensorGPU:
        return TensorGPU(
            self._samples[i], self._layout, self._event, self._source_info[i % len(self)]
        )

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def at(self, i: int):
        """Sample ``i`` as a CuPy array (waits for the batch; no deprecation warning here)."""
        self._ready()
        return self._samples[i]

    def data_ptr(self) -> int:
        return int(self._samples.ptrs[0]) if len(self) else 0

    # --- whole-batch conversions ------------------------------------------------------------
    def _dense(self):
        if self._samples.dense is None:
            with cupy.cuda.Device(self.device_id()):
                stream = (
                    self._stream if self._stream is not None else cupy.cuda.get_current_stream()
                )
                with stream:
                    dense = self._samples.to_dense()
            self._samples = SampleList.from_dense(dense)
            if self._stream is not None:
                self._event = cupy.cuda.Event(disable_timing=True)
                self._event.record(self._stream)
        return self._samples.dense

    def as_tensor(self) -> TensorGPU:
        """The whole batch as one (N, ...) tensor; samples must have equal shapes."""
        dense = self._dense()
        return TensorGPU(dense, "N" + self._layout if self._layout else "", self._event)

    def copy_to_external(
        self, ptr, cuda_stream=None, non_blocking: bool = False, use_copy_kernel: bool = False
    ) -> None:
        """Copy every sample, one after the other (C order), to device memory at ``ptr``, as
        DALI's ``TensorListGPU.copy_to_external`` (see :meth:`TensorGPU.copy_to_external`)."""
        samples = [self._samples.dense] if self._samples.dense is not None else list(self._samples)
        _copy_to_device(ptr, samples, self._event, cuda_stream, non_blocking, self._stream)

    def as_array(self):
        """The batch as one CuPy array (waits for the batch)."""
        dense = self._dense()
        self._ready()
        return dense

    def as_cpu(self) -> TensorListCPU:
        """A host copy as a :class:`TensorListCPU` (one transfer when the batch is dense)."""
        self._ready()
        with cupy.cuda.Device(self.device_id()):
            if self._samples.dense is not None:
                host = cupy.asnumpy(self._samples.dense)
                return TensorListCPU(host, self._layout, self._source_info)
            return TensorListCPU(
                [cupy.asnumpy(a) for a in self._samples], self._layout, self._source_info
            )

    @property
    def __cuda_array_interface__(self) -> dict:
        dense = self._dense()
        self._ready()
        return dense.__cuda_array_interface__

    def __dlpack__(self, stream=None, **kwargs):
        dense = self._dense()
        _wait(self._event, stream)
        return dense.__dlpack__(stream=-1, **kwargs)

    def __dlpack_device__(self):
        return (2, self.device_id())

    def __repr__(self) -> str:
        return (
            f"TensorListGPU(len={len(self)}, dtype={self.dtype.name}, "
            f"layout={self._layout!r}, device={self.device_id()})"
        )


def _raw_stream(stream) -> int | None:
    """A ``cudaStream_t`` from a CuPy or torch stream, a ctypes pointer or an int."""
    import ctypes

    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    if isinstance(stream, ctypes.c_void_p):
        return int(stream.value or 0)
    return int(stream)


def _copy_to_device(ptr, arrays, event, cuda_stream, non_blocking, producer=None) -> None:
    from .tensors import _address

    dst = _address(ptr)
    raw = _raw_stream(cuda_stream)
    if raw is None:
        stream = producer if producer is not None else cupy.cuda.get_current_stream()
        raw = stream.ptr
    if event is not None:  # the copy's stream waits for the work that made the batch
        cupy.cuda.runtime.streamWaitEvent(raw, event.ptr)
    kind = cupy.cuda.runtime.memcpyDefault
    temporary = False  # a strided sample packed first: wait before its memory goes back
    for a in arrays:
        if not a.flags.c_contiguous:
            with cupy.cuda.ExternalStream(raw):
                a = cupy.ascontiguousarray(a)
            temporary = True
        if a.nbytes:
            cupy.cuda.runtime.memcpyAsync(dst, a.data.ptr, a.nbytes, kind, raw)
        dst += a.nbytes
    if temporary or not non_blocking:
        cupy.cuda.runtime.streamSynchronize(raw)
