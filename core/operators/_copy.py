"""``_copy_to_gpu``: the operator behind ``DataNode.gpu()``, a CPU -> GPU copy through pinned
memory (device "mixed").

The whole batch is packed into one pinned host buffer and sent with one asynchronous copy on the
calling lane's stream. A batch of equal shapes becomes one dense device array; a ragged batch one
device buffer with each sample at a 256-byte aligned offset. The pinned buffer is kept until the
copy's event has passed, so it is never refilled while the copy reads it. Samples that are
already on the GPU (a GPU ``external_source`` fed CuPy or DLPack arrays) are copied device to
device instead, so the pipeline's batch never aliases memory the source may reuse.

Several lanes may run it at once (``concurrent_batches``): each call packs into its own pinned
buffer, and the list of buffers awaiting their copy is guarded by a lock.

A batch the sample processes sent back for a ``.gpu()`` copy alone (Jasper's trimmed audio) lies
in page-locked memory: where the processes wrote it, in the upload area (``_upload_area.py``,
page-locked by :meth:`PinnedBlocks.share`), or else unpacked from their memfd into pinned
blocks (:class:`PinnedBlocks`); the executor marks it :class:`PinnedSamples`. Each sample is
then uploaded from where it lies, one asynchronous copy each into the device batch, with no
copy of the batch into a staging buffer (16 MB a batch of Jasper validation; BENCHMARKS.md,
"Jasper validation's audio into pinned memory").

Pinned buffers come from CuPy's pinned pool in size classes (:func:`pinned_size`): the pool
hands a freed block only to a request of the same size, and a ragged batch (speech) has another
total every batch, so each batch took a new ``cudaHostAlloc`` and the pool kept every freed
block, never used again: the process's pinned memory grew by a batch's bytes every iteration.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from ..graph import Operator, register
from ..kernels._batch import alloc_batch, packed_batch, ragged_layout, sample_list
from ..kernels.copy import copy_batch, copy_descriptors

_CLASS_STEPS = 8  # size classes per power of two: a buffer is at most 1/8 larger than asked
# A batch in pinned blocks goes up sample by sample (PinnedSamples) when its samples average at
# least this: one copy call (some microseconds of host) a sample against packing the batch
IN_PLACE_MIN_BYTES = 64 << 10


def pinned_size(nbytes: int) -> int:
    """The size class ``nbytes`` is rounded up to: a multiple of 512 bytes (the pool's unit)
    and of 1/8 of the power of two below it, so a pool holds few distinct sizes."""
    step = max(512, (1 << max(0, nbytes.bit_length() - 1)) // _CLASS_STEPS)
    return max(step, -(-nbytes // step) * step)


def _pinned(shape: tuple, dtype) -> np.ndarray:
    """An empty C-contiguous pinned host array: a view of a block of the size class."""
    import cupyx

    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    block = cupyx.empty_pinned((pinned_size(max(nbytes, 1)),), np.uint8)
    return block[:nbytes].view(dtype).reshape(shape)


class PinnedBlocks:
    """``_sample_server.unpack``'s ``alloc`` for values only a ``.gpu()`` copy takes: pinned
    host blocks (size classes, on ``device_id``), with the (start, end) address of each it
    gave in ``spans`` (what :class:`PinnedSamples` is checked against), and of the sample
    processes' upload area once :meth:`share` made it usable."""

    __slots__ = ("device_id", "spans", "_shared")

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self.spans: list[tuple[int, int]] = []
        self._shared = False

    def share(self, area) -> bool:
        """Whether the replies may go to ``area`` (``_upload_area.UploadArea``): it is
        page-locked for this device (on first use; a failure leaves the area unused: the
        replies are copied into blocks, as before)."""
        if not area.tried:
            with area.lock:
                if not area.tried:
                    area.usable = _page_lock(area, self.device_id)
                    area.tried = True
        if area.usable and not self._shared:
            self._shared = True
            self.spans.append((area.address, area.address + area.size))
        return area.usable

    def __call__(self, nbytes: int) -> np.ndarray:
        import cupy

        with cupy.cuda.Device(self.device_id):
            block = _pinned((nbytes,), np.uint8)
        start = block.ctypes.data
        self.spans.append((start, start + nbytes))
        return block


def _page_lock(area, device_id: int) -> bool:
    """Page-lock the upload area's mapping (``cudaHostRegister``, portable: every context
    sees it pinned), undone by ``area.unlock`` once the area is retired and nothing views it
    (no copy reads it); False where CUDA refuses it."""
    import functools

    import cupy

    try:
        with cupy.cuda.Device(device_id):
            cupy.cuda.runtime.hostRegister(area.address, area.size, 1)  # ...Portable
    except Exception:  # (CUDA errors are CuPy's own types)
        return False
    area.unlock = functools.partial(_page_unlock, cupy, area.address, device_id)
    return True


def _page_unlock(cupy, address: int, device_id: int) -> None:
    """Undo :func:`_page_lock`."""
    try:
        with cupy.cuda.Device(device_id):
            cupy.cuda.runtime.hostUnregister(address)
    except Exception:
        pass


class PinnedSamples(list):
    """The samples of a CPU batch unpacked into the pinned blocks ``spans`` ((start, end)
    addresses, :class:`PinnedBlocks`): the ``.gpu()`` copy uploads each sample that lies in
    one of them from there. A plain list again wherever the executor reorders or replaces
    samples (a skipped sample's replacement), and then copied as any batch."""

    def __init__(self, samples, spans: list[tuple[int, int]]):
        super().__init__(samples)
        self.spans = spans


@register
class CopyToGpu(Operator):
    """Copies a CPU batch to the GPU (what ``node.gpu()`` builds)."""

    schema = "_copy_to_gpu"
    devices = ("mixed",)
    concurrent_batches = True
    dense_inputs = True

    def setup(self) -> None:
        self._pending: deque = deque()  # (event, pinned buffer) of copies maybe in flight
        self._lock = threading.Lock()

    def _upload(self, pinned, stream):
        """``pinned`` copied to a new device array on ``stream``; ``pinned`` is held until the
        copy has passed (those whose copies ended are let go of)."""
        import cupy

        dev = cupy.empty(pinned.shape, pinned.dtype)
        dev.set(pinned, stream=stream)
        self._hold(pinned, stream)
        return dev

    def _hold(self, host, stream) -> None:
        """Keep ``host`` until the copies enqueued on ``stream`` so far have passed."""
        import cupy

        event = cupy.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        with self._lock:
            while self._pending and self._pending[0][0].done:
                self._pending.popleft()
            self._pending.append((event, host))

    def _upload_in_place(self, samples: PinnedSamples, stream):
        """The batch uploaded sample by sample from the pinned blocks it lies in, into the
        layout the staged copies make (one dense array, or ``ragged_layout``'s buffer); None
        (the caller stages it) unless every sample is a C-contiguous array of one dtype and
        rank inside a block and they average ``IN_PLACE_MIN_BYTES``."""
        import cupy

        n = len(samples)
        if n == 0:
            return None
        first = samples[0]
        if type(first) is not np.ndarray:
            return None
        dtype, ndim = first.dtype, first.ndim
        for a in samples:
            if (
                type(a) is not np.ndarray
                or a.dtype != dtype
                or a.ndim != ndim
                or not a.flags.c_contiguous
            ):
                return None
        sizes = [a.nbytes for a in samples]
        if sum(sizes) < n * IN_PLACE_MIN_BYTES:
            return None
        src = [a.ctypes.data for a in samples]
        # every sample inside one block: checked for the batch at once (a generator over the
        # blocks a sample cost more than its copy call)
        starts = np.array(src, np.int64)
        ends = starts + np.array(sizes, np.int64)
        inside = np.zeros(n, bool)
        for lo, hi in samples.spans:
            inside |= (starts >= lo) & (ends <= hi)
        if not inside.all():
            return None
        shapes = np.array([a.shape for a in samples], np.int64).reshape(n, ndim)
        out = alloc_batch(shapes, dtype, cupy.cuda.runtime.getDevice())
        runtime = cupy.cuda.runtime
        kind, handle = runtime.memcpyHostToDevice, stream.ptr
        for dst, p, size in zip(out.ptrs.tolist(), src, sizes, strict=True):
            if size:
                runtime.memcpyAsync(dst, p, size, kind, handle)
        self._hold(samples, stream)
        return out

    def run_batch(self, inputs, args, params, stream):
        import cupy

        SampleList = sample_list()
        if inputs[0] and isinstance(inputs[0][0], cupy.ndarray):
            return _copy_on_device(list(inputs[0]), stream)
        if isinstance(inputs[0], PinnedSamples):
            out = self._upload_in_place(inputs[0], stream)
            if out is not None:
                return out
        batch = getattr(inputs[0], "array", None)  # the workers packed it (graph.Rows)
        if batch is not None:
            pinned = _pinned(batch.shape, batch.dtype)
            np.copyto(pinned, batch)
            return SampleList.from_dense(self._upload(pinned, stream))
        samples = [np.asarray(x) for x in inputs[0]]
        n = len(samples)
        if n == 0:
            return SampleList.from_arrays([])
        dtypes = {a.dtype for a in samples}
        if len(dtypes) > 1:
            raise TypeError(f"_copy_to_gpu: samples have mixed dtypes {sorted(map(str, dtypes))}")
        dtype = samples[0].dtype
        shape_list = [a.shape for a in samples]
        if len(set(shape_list)) == 1:
            pinned = _pinned((n, *samples[0].shape), dtype)
            np.stack(samples, out=pinned)
            return SampleList.from_dense(self._upload(pinned, stream))
        shapes = np.array(shape_list, np.int64).reshape(n, samples[0].ndim)
        # the device batch's layout (kernels/_batch.ragged_layout: aligned offsets, C strides)
        offsets, total, _ = ragged_layout(shapes, dtype.itemsize)
        pinned = _pinned((total,), np.uint8)
        typed = pinned[: total - total % dtype.itemsize].view(dtype)
        starts = (offsets // dtype.itemsize).tolist()  # aligned: multiples of the item size
        for a, start in zip(samples, starts, strict=True):  # copied as the samples' type
            typed[start : start + a.size] = a.reshape(-1)
        flat = self._upload(pinned, stream)
        return packed_batch(flat, shapes, dtype, flat.device.id)


def _copy_on_device(samples: list, stream):
    """A batch of device arrays, copied into the pipeline's memory on ``stream`` in one launch
    of the batched copy kernel (``kernels/copy.py``): one dense array when the shapes agree,
    else one buffer with each sample at an aligned offset. A sample that is not C-contiguous
    is made so first (its own copy). One launch instead of one allocation and copy per sample:
    at 64 samples the per-sample copies cost more host time than DALI's whole iteration."""
    import cupy

    # one pass over the samples (a GPU source's batch is a list of arrays, 128 in the automatic
    # augmentations' model: each attribute read costs, and five passes cost ~4x this one)
    first = samples[0]
    dtype, ndim = first.dtype, first.ndim
    mixed_types = mixed_ranks = False
    shapes, nbytes, ptrs, strided = [], [], [], []
    for i, a in enumerate(samples):
        if a.dtype != dtype:
            mixed_types = True
        if a.ndim != ndim:
            mixed_ranks = True
        shapes.append(a.shape)
        nbytes.append(a.nbytes)
        if a.flags.c_contiguous:
            ptrs.append(a.data.ptr)
        else:
            ptrs.append(0)
            strided.append(i)
    if mixed_types:
        dtypes = sorted({str(a.dtype) for a in samples})
        raise TypeError(f"_copy_to_gpu: samples have mixed dtypes {dtypes}")
    if mixed_ranks:
        raise ValueError("a GPU batch must have one number of dimensions per sample")
    # The source made its arrays on the legacy default stream, or handed them over through
    # DLPack, which orders its producer's stream before that one: wait for it on the device.
    ready = cupy.cuda.Event(block=False, disable_timing=True)
    ready.record(cupy.cuda.Stream.null)
    stream.wait_event(ready)
    with stream:
        # the contiguous copies are freed on return: CuPy's pool hands their memory only to
        # later work on this stream, after the kernel has read them
        copies = [cupy.ascontiguousarray(samples[i]) for i in strided]
        for i, c in zip(strided, copies, strict=True):
            ptrs[i] = c.data.ptr
        device = cupy.cuda.Device().id  # the pipeline's (current), wherever the source's are
        out = alloc_batch(shapes, dtype, device)
    nbytes = np.array(nbytes, np.int64)
    ptrs = np.array(ptrs, np.int64)
    descs = copy_descriptors(ptrs, out.ptrs.view(np.int64), nbytes, nbytes, 1)
    copy_batch(descs, out.device_id, stream)
    return out
