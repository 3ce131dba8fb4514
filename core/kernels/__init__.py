"""CUDA kernels of the GPU operators: sources (``*.cu``/``*.cuh``, package data) and their
CuPy factories and batch launchers.

Every launcher takes a whole batch (a :class:`~dlpipe.tensors_gpu.SampleList` or a list of CuPy
arrays), packs the per-sample parameters into one small array that goes to the device in one
copy, and launches one kernel on the given stream (``blockIdx.z`` is the sample). Kernel
factories are ``_get_<op>_kernel(...)``, memoised per device and type combination.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading

import numpy as np

_DIR = os.path.dirname(__file__)

# numpy dtype -> C type name used in the kernel templates
CTYPES = {
    np.dtype(np.uint8): "uint8",
    np.dtype(np.int8): "int8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.int16): "int16",
    np.dtype(np.int32): "int",
    np.dtype(np.uint32): "unsigned int",
    np.dtype(np.float16): "dl_half",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
}
_WIDE = {np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.float64)}


def ctype(dtype) -> str:
    """The C name of ``dtype`` in the kernels; TypeError for a type they do not handle."""
    dt = np.dtype(dtype)
    if dt not in CTYPES:
        raise TypeError(
            f"GPU kernels do not handle dtype {dt}; supported: {sorted(str(t) for t in CTYPES)}"
        )
    return CTYPES[dt]


def acc_ctype(*dtypes) -> str:
    """Accumulator type: double when a 32-bit integer or float64 is involved, else float."""
    return "double" if any(np.dtype(d) in _WIDE for d in dtypes) else "float"


@functools.cache
def source(name: str) -> str:
    """Kernel source ``name`` with ``common.cuh`` inlined (NVRTC needs no include path then)."""
    with open(os.path.join(_DIR, "common.cuh")) as f:
        common = f.read().replace("#pragma once", "")
    with open(os.path.join(_DIR, name)) as f:
        return f.read().replace('#include "common.cuh"', common)


@functools.cache
def get_function(src_name: str, expression: str, device_id: int):
    """The compiled kernel ``expression`` (a template instantiation) of ``src_name`` on a device.

    CuPy appends ``-ftz=true`` to every compilation: float32 operations flush subnormal
    operands and results to zero (float64 ones do not), unlike numpy on the CPU. A kernel that
    must agree with the CPU on values below 2**-126 keeps them out of float32 arithmetic
    (``audio.cu`` ``to_decibels``)."""
    import cupy

    with cupy.cuda.Device(device_id):
        mod = cupy.RawModule(
            code=source(src_name), options=("--std=c++17",), name_expressions=[expression]
        )
        return mod.get_function(expression)


def upload(host: np.ndarray, stream):
    """Copy a small host array (per-sample parameters, descriptors) to a new device array on
    ``stream`` (None: the current stream), allocated on the current device.

    One ``cudaMemcpyAsync`` from the array's own (pageable) memory, staged by the driver
    before the call returns, as ``ndarray.set`` does, without ``set``'s checks, ctypes pointer
    object and device switches. Measured on the H100 (CuPy 14.2, one thread): allocation and
    copy of 0.5 / 25 / 100 KB took 12.0 / 13.5 / 19.5 us against 13.8 / 15.7 / 22.0 us with
    ``set`` (``cupy.asarray``: 28-33 us); the augmentations' GPU stage uploads ~22
    descriptors a batch.

    In the GPU stage (``current`` with an :class:`Arena`, ``stream`` its stream) the device
    array is cut from the batch's one arena buffer instead of a pool allocation each."""
    import cupy

    host = np.ascontiguousarray(host)
    arena = getattr(_SCOPE, "arena", None)
    dev = None
    if arena is not None and stream is arena.stream:  # (the GPU stage's batch: ``current``)
        dev = arena.take(host.shape, host.dtype, host.nbytes)
    if dev is None:
        dev = cupy.empty(host.shape, host.dtype)
    if host.nbytes:
        runtime = cupy.cuda.runtime
        on = stream if stream is not None else cupy.cuda.get_current_stream()
        runtime.memcpyAsync(dev.data.ptr, host_address(host), host.nbytes,
                            runtime.memcpyHostToDevice, on.ptr)  # fmt: skip
    return dev


_ADDRESS_OF, _BYTE_AT = ctypes.addressof, ctypes.c_byte.from_buffer


def host_address(host: np.ndarray) -> int:
    """The address of a contiguous host array's first byte: through ctypes' buffer protocol
    for a writable array of at least one byte (0.35 us here, against 1.5 us for
    ``ndarray.ctypes.data``, which builds a helper object; ~10 uploads a speech batch), else
    ``ctypes.data``."""
    if host.flags.writeable and host.nbytes:
        return _ADDRESS_OF(_BYTE_AT(host))
    return host.ctypes.data


def grid_for(max_h: int, max_w: int, n: int, block=(32, 8)) -> tuple[tuple, tuple]:
    bx, by = block
    if max_h == 1:  # one row per sample (flat casts): every thread of a block along x
        bx, by = bx * by, 1
    return ((max_w + bx - 1) // bx, (max_h + by - 1) // by, n), (bx, by, 1)


# Per thread: ``.stream``, the stream last made CuPy's current through ``stream_scoped`` or
# ``current`` (unset: none; a launcher called with it runs as it is), and ``.arena``, the
# ``Arena`` of the GPU stage's batch being run on this thread (unset or None: none).
_SCOPE = threading.local()


def stream_scoped(fn):
    """Run a launcher with its ``stream`` argument as CuPy's current stream, so the outputs and
    descriptors it allocates belong to that stream in CuPy's pool (stream-ordered reuse).

    Where that stream is already current (the GPU stage runs its operators under
    :func:`current`; a launcher calls another), the launcher runs as it is: the GPU stage's
    ~10 launchers a speech batch skip a ``with stream:`` each (a few us of CuPy's
    bookkeeping). Code between that enters another stream must not call a launcher with the
    outer one (none does: the GPU operators enter only the stream they are given)."""

    @functools.wraps(fn)
    def wrapper(*args, stream=None, **kwargs):
        scope = _SCOPE
        outer = getattr(scope, "stream", None)
        if stream is None or stream is outer:
            return fn(*args, stream=stream, **kwargs)
        scope.stream = stream
        try:
            with stream:
                return fn(*args, stream=stream, **kwargs)
        finally:
            scope.stream = outer

    return wrapper


_ARENA_ALIGN = 256  # bytes: every upload cut from an arena starts at such an offset


class Arena:
    """One device buffer per GPU-stage batch that the batch's uploads on ``stream`` (the
    descriptor tables, ~10 a speech batch) are cut from, instead of a CuPy pool allocation
    (and free) each: sized by the largest batch before (the first batch's uploads, and any that
    do not fit, are allocated as before). A cut is a view of the buffer, which stays allocated
    while any cut is referenced; at the batch's end the stage drops it, and CuPy's pool reuses
    it in the stream's order, after the batch's kernels, as it did each upload's array. (The
    size only grows: a batch that once uploaded much keeps later buffers that large.)"""

    __slots__ = ("stream", "want", "buf", "used", "needed")

    def __init__(self, stream):
        self.stream = stream
        self.want = 0  # bytes: the most a batch cut
        self.buf = None
        self.used = self.needed = 0

    def start(self) -> None:
        self.buf, self.used, self.needed = None, 0, 0

    def end(self) -> None:
        self.want = max(self.want, self.needed)
        self.buf = None

    def take(self, shape: tuple, dtype, nbytes: int):
        """A device array of ``shape`` / ``dtype`` (``nbytes``) cut from the buffer, or None
        when it does not fit (the buffer is made at the first cut of a batch)."""
        import cupy

        size = -(-max(nbytes, 1) // _ARENA_ALIGN) * _ARENA_ALIGN
        self.needed += size
        buf = self.buf
        if buf is None:
            buf = self.buf = cupy.empty(max(self.want, size), np.uint8)
        if self.used + size > buf.nbytes:
            return None
        out = cupy.ndarray(shape, dtype, buf.data + self.used)
        self.used += size
        return out


class current:  # noqa: N801 (used as a function: ``with kernels.current(stream):``)
    """``with current(stream, arena):`` makes ``stream`` CuPy's current stream, and known so
    to :func:`stream_scoped` launchers (the GPU stage's operators, on its stream); with an
    :class:`Arena` (of that stream), :func:`upload` cuts the uploads from it meanwhile."""

    __slots__ = ("stream", "arena", "outer")

    def __init__(self, stream, arena: Arena | None = None):
        self.stream = stream
        self.arena = arena

    def __enter__(self):
        self.outer = (getattr(_SCOPE, "stream", None), getattr(_SCOPE, "arena", None))
        self.stream.__enter__()
        _SCOPE.stream = self.stream
        if self.arena is not None:
            self.arena.start()
        _SCOPE.arena = self.arena
        return self.stream

    def __exit__(self, *exc):
        _SCOPE.stream, _SCOPE.arena = self.outer
        if self.arena is not None:
            self.arena.end()
        return self.stream.__exit__(*exc)
