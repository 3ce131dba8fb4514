"""``fn.external_source``: batches from Python — a callable, an iterable, or ``feed_input``.

Sources run on the CPU stage thread, in order, before the per-sample operators, so a source
sees its calls in iteration order whatever the prefetch depth (with prefetching, calls run
ahead of what the consumer has taken, as in DALI). The batch a source returns sets the batch
size of its iteration (at most ``max_batch_size``).

The end of the data (StopIteration from the callable or the iterator) ends the epoch:
``pipe.run()`` raises StopIteration once the batches before it are consumed, and
``pipe.reset()`` starts the next epoch (``epoch_idx`` + 1; iterables are restarted when
``cycle="raise"``).

Choices where DALI's documentation is silent (stated here on purpose):

* ``batch=False`` with a per-sample callable: StopIteration for any sample ends the epoch and
  the incomplete batch is dropped. With a per-sample iterable, the last batch may be partial.
* ``parallel=True`` runs a per-sample callable (``batch=False``) in ``py_num_workers`` worker
  processes (``py_start_method``: "fork" or "spawn"); arrays of 64 KB or more come back
  through shared memory, smaller ones pickled.
* CuPy arrays and DLPack objects are accepted. A ``device="cpu"`` source copies GPU data to
  host memory; a ``device="gpu"`` source keeps it on the GPU (one device-to-device copy into
  the pipeline's memory, on its stream, in ``_copy_to_gpu``) and hands host data to the GPU
  stage through a pinned-memory copy.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from collections import deque
from typing import Any

import numpy as np

from ..errors import ArgumentError, PipelineError
from ..graph import Operator, register
from ..types import BatchInfo, SampleInfo, to_numpy_dtype

_CYCLE = {None: "no", False: "no", "no": "no", True: "quiet", "quiet": "quiet", "raise": "raise"}


def is_device_array(x: Any) -> bool:
    """Whether ``x`` lives in GPU memory (CuPy, or anything with ``__cuda_array_interface__``
    or a CUDA DLPack device)."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return int(dev()[0]) in (2, 13)  # kDLCUDA, kDLCUDAManaged
    except Exception:
        return False


def to_device_array(x: Any):
    """A GPU array as a CuPy array, without a copy (the caller copies before the source may
    reuse the memory: see ``_copy_to_gpu``)."""
    import cupy

    if isinstance(x, cupy.ndarray):
        return x
    if hasattr(x, "__cuda_array_interface__"):
        return cupy.asarray(x)
    return cupy.from_dlpack(x)


def to_host_array(x: Any, who: str) -> np.ndarray:
    """numpy, CuPy, DLPack or array-like -> a numpy array (a copy only when needed)."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__cuda_array_interface__") and hasattr(x, "get"):  # CuPy
        return x.get()
    if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
        try:
            return np.from_dlpack(x)
        except (RuntimeError, BufferError, TypeError):
            import cupy  # a GPU DLPack producer

            return cupy.from_dlpack(x).get()
    try:
        return np.asarray(x)
    except Exception as e:
        raise PipelineError(f"{who}: cannot convert a {type(x).__name__} to an array: {e}") from e


@register(legacy=("ExternalSource",))
class ExternalSource(Operator):
    """Feeds data from Python into the pipeline.

    Args:
        source: a callable or an iterable; None means data comes from ``pipe.feed_input(name,
            data)`` or ``pipe.run(name=data)``.
        num_outputs: the source returns this many batches (a tuple) each time; default one.
        batch: True (default): the source returns a whole batch (a list of samples or an array
            whose first axis is the batch). False: it returns one sample; a callable is then
            called with a :class:`~dlpipe.types.SampleInfo`.
        batch_info: call a batch callable with a :class:`~dlpipe.types.BatchInfo` instead of
            the iteration index.
        cycle: "no"/False/None (default): one pass over an iterable, then StopIteration at
            every later run; "quiet"/True: restart the iterable silently; "raise":
            StopIteration, then restart after ``reset()``. Cycling needs a re-iterable source
            (a collection or a generator *function*).
        parallel: run a per-sample callable in worker processes.
        layout, dtype, ndim: expected layout, type and rank of the samples (checked).
        device: "cpu" or "gpu" (GPU output through a pinned-memory copy).
        prefetch_queue_depth, no_copy, blocking, repeat_last, cuda_stream, use_copy_kernel,
        bytes_per_sample_hint: accepted as in DALI.

    Example:
        >>> with pipe:
        ...     images = fn.external_source(lambda info: load(info.idx_in_epoch), batch=False)
    """

    schema = "external_source"
    light = True
    batch_level = True  # run_batch_cpu hands the fetched batch on whole
    devices = ("cpu", "gpu")
    num_inputs = (0, 0)
    provides_batch = True
    positional_args = ("source",)

    def setup(
        self,
        *,
        source=None,
        num_outputs: int | None = None,
        batch: bool | None = None,
        batch_info: bool = False,
        cycle=None,
        parallel: bool = False,
        prefetch_queue_depth: int = 1,
        layout: str | None = None,
        dtype=None,
        ndim: int | None = None,
        no_copy: bool = False,
        blocking: bool = False,
        repeat_last: bool = False,
        cuda_stream=None,
        use_copy_kernel: bool = False,
        bytes_per_sample_hint=None,
    ) -> None:
        who = f"external_source {self.name or ''}".strip()
        self.who = who
        if cycle not in _CYCLE:
            raise ArgumentError(f"{who}: cycle={cycle!r} must be 'no', 'quiet', 'raise' or a bool")
        if num_outputs is not None and (not isinstance(num_outputs, int) or num_outputs < 1):
            raise ArgumentError(f"{who}: num_outputs={num_outputs!r} must be an integer >= 1")
        if source is not None and not callable(source) and not hasattr(source, "__iter__"):
            raise ArgumentError(f"{who}: source={source!r} is neither callable nor iterable")
        self.source = source
        # Required positional parameters of a plain callable source (checked once, not per batch).
        self._source_params = (
            _num_params(source) if source is not None and not _is_iterable_source(source) else 0
        )
        self.multi = num_outputs is not None
        self.num_outputs = num_outputs or 1
        self.batch = True if batch is None else bool(batch)
        self.batch_info = batch_info
        self.cycle = _CYCLE[cycle]
        self.parallel = parallel
        if parallel and (self.batch or not callable(source) or _is_iterable_source(source)):
            raise ArgumentError(f"{who}: parallel=True needs a per-sample callable (batch=False)")
        if self.cycle != "no" and (source is None or not _is_iterable_source(source)):
            raise ArgumentError(f"{who}: cycle={cycle!r} needs an iterable or generator source")
        if self.cycle != "no" and inspect.isgenerator(source):
            raise ArgumentError(
                f"{who}: cannot cycle through a generator object; pass the generator function"
            )
        self.to_gpu = self.device == "gpu"
        self.device = "cpu"  # the source itself runs on the CPU stage
        self.layout = layout or ""
        self.dtype = to_numpy_dtype(dtype) if dtype is not None else None
        self.ndim = ndim
        self.fed: deque = deque()
        self.epoch_idx = 0
        self.iteration = 0
        self.sample_in_epoch = 0
        self._iter = None
        self._exhausted = False
        self._pool = None
        if source is not None and _is_iterable_source(source):
            self._iter = _make_iter(source)

    def after_call(self, outputs):
        return [x.gpu() for x in outputs] if self.to_gpu else outputs

    def output_layouts(self, input_layouts):
        return [self.layout] * self.num_outputs

    # --- lifecycle --------------------------------------------------------------------------
    def start_workers(self, num_workers: int, start_method: str) -> None:
        if not self.parallel or self._pool is not None:
            return
        if num_workers < 1:
            raise PipelineError(f"{self.who}: parallel=True needs py_num_workers >= 1")
        import multiprocessing

        self._pool = multiprocessing.get_context(start_method).Pool(num_workers)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None

    def reset_epoch(self) -> None:
        """Called by ``pipe.reset()`` after the end of the data."""
        self.epoch_idx += 1
        self.iteration = 0
        self.sample_in_epoch = 0
        if self.cycle == "raise":
            self._iter = _make_iter(self.source)
            self._exhausted = False

    def state_dict(self) -> dict:
        return {
            "epoch_idx": self.epoch_idx,
            "iteration": self.iteration,
            "sample_in_epoch": self.sample_in_epoch,
        }

    def load_state_dict(self, state: dict) -> None:
        """Single-argument callables continue at the saved iteration; an iterable, a fed source
        or a callable without arguments cannot be restored (its position is not ours): it
        starts over, with a warning, as in DALI."""
        no_argument = (
            self._iter is None
            and self.batch
            and not self.batch_info
            and self.source is not None
            and self._source_params == 0
        )
        if self.source is None or self._iter is not None or no_argument:
            warnings.warn(
                f"{self.who}: only callable sources are restored from a checkpoint; "
                "this one starts over",
                stacklevel=2,
            )
            return
        self.epoch_idx = state["epoch_idx"]
        self.iteration = state["iteration"]
        self.sample_in_epoch = state["sample_in_epoch"]

    # --- producing a batch ------------------------------------------------------------------
    def batch_params(self, n: int) -> list:
        if self.source is None:
            if not self.fed:
                raise PipelineError(
                    f"{self.who}: no data: call pipe.feed_input({self.name!r}, batch) before "
                    "running (one batch per scheduled iteration)"
                )
            raw = self.fed.popleft()
        elif self.batch:
            raw = self._next_batch()
        else:
            raw = self._next_samples(n)
        samples = self._to_samples(raw, n)
        self.iteration += 1
        self.sample_in_epoch += len(samples)
        return samples

    def _next_batch(self):
        if self._iter is not None:
            return self._next_from_iter()
        if self.batch_info:
            return self.source(BatchInfo(self.iteration, self.epoch_idx))
        if self._source_params >= 1:
            return self.source(self.iteration)
        return self.source()

    def _next_from_iter(self):
        if self._exhausted:
            raise StopIteration
        try:
            return next(self._iter)
        except StopIteration:
            if self.cycle == "quiet":
                self._iter = _make_iter(self.source)
                return next(self._iter)
            self._exhausted = True
            raise

    def _next_samples(self, n: int) -> list:
        if self._iter is not None:
            out = []
            for _ in range(n):
                try:
                    out.append(self._next_from_iter())
                except StopIteration:
                    if not out:
                        raise
                    break
            return out
        infos = [
            SampleInfo(self.sample_in_epoch + i, i, self.iteration, self.epoch_idx)
            for i in range(n)
        ]
        if self._pool is not None:
            results = [_from_shm(r) for r in self._pool.map(_ShmCall(self.source), infos)]
            if any(r is _STOP for r in results):
                raise StopIteration
            return results
        return [self.source(info) for info in infos]

    def _to_samples(self, raw, n: int) -> list:
        """The source's batch -> a list of per-sample arrays (tuples when num_outputs is set)."""
        if self.multi:
            # Per sample (batch=False), raw is a list of the samples' tuples: each is checked.
            for item in [raw] if self.batch else raw:
                if not isinstance(item, tuple | list) or len(item) != self.num_outputs:
                    raise PipelineError(
                        f"{self.who}: the source must return {self.num_outputs} outputs, got "
                        f"{type(item).__name__}"
                    )
            if not self.batch:  # list of per-sample tuples
                columns = list(zip(*raw, strict=True)) if raw else []
                raw = columns if columns else [[]] * self.num_outputs
            outs = [self._batch_arrays(b, n) for b in raw]
            sizes = {len(o) for o in outs}
            if len(sizes) > 1:
                raise PipelineError(f"{self.who}: outputs have different batch sizes {sizes}")
            return list(zip(*outs, strict=True))
        return self._batch_arrays(raw, n)

    def _batch_arrays(self, raw, n: int) -> list[np.ndarray]:
        if hasattr(raw, "as_cpu") and hasattr(raw, "at"):  # a TensorList (maybe ragged)
            raw = raw.as_cpu()
            samples = [np.asarray(raw.at(i)) for i in range(len(raw))]
        elif isinstance(raw, list | tuple):
            samples = [self._array(x) for x in raw]
        else:
            arr = self._array(raw)
            if arr.ndim == 0:
                raise PipelineError(f"{self.who}: a batch needs a leading batch axis, got a scalar")
            samples = list(arr)
        if not samples:
            raise PipelineError(f"{self.who}: the source returned an empty batch")
        if len(samples) > n:
            raise PipelineError(
                f"{self.who}: a batch of {len(samples)} samples exceeds max_batch_size={n}"
            )
        for s in samples:
            if self.dtype is not None and s.dtype != self.dtype:
                raise PipelineError(f"{self.who}: expected dtype {self.dtype}, got {s.dtype}")
            if self.ndim is not None and s.ndim != self.ndim:
                raise PipelineError(f"{self.who}: expected ndim {self.ndim}, got {s.ndim}")
        return samples

    def _array(self, x):
        """A source's array: kept on the GPU for a GPU source, else on the host."""
        if type(x) is np.ndarray:  # the common case, without the checks below
            return x
        cupy = sys.modules.get("cupy")  # loaded by then when CuPy arrays come
        if self.to_gpu and cupy is not None and type(x) is cupy.ndarray:
            return x  # the GPU source's common case (hasattr probes cost ~1 us a sample)
        if self.to_gpu and is_device_array(x):
            return to_device_array(x)
        return to_host_array(x, self.who)

    def run_sample(self, inputs, args, param):
        return param

    def run_batch_cpu(self, inputs, args, params):
        """The batch ``batch_params`` fetched, as the source gave it: no step per sample (a
        ``.gpu()`` copy packs it into pinned memory in one pass)."""
        if self.multi:
            return tuple(list(col) for col in zip(*params, strict=True))
        return (list(params),)


class _ShmCall:
    """Runs a per-sample callback in a worker process and hands a large array back through
    shared memory instead of a pickle (small results travel as they are)."""

    def __init__(self, source):
        self.source = source

    def __call__(self, info):
        from multiprocessing import resource_tracker, shared_memory

        try:
            out = np.asarray(to_host_array(self.source(info), "external_source"))
        except StopIteration:
            # Raised through Pool.map it would silently cut the worker's chunk short.
            return ("stop",)
        if out.nbytes < 65536:
            return out
        shm = shared_memory.SharedMemory(create=True, size=out.nbytes)
        # The parent attaches (which registers it again) and unlinks: one registration only.
        resource_tracker.unregister(shm._name, "shared_memory")
        try:
            np.ndarray(out.shape, out.dtype, buffer=shm.buf)[...] = out
            return ("shm", shm.name, out.shape, out.dtype.str)
        finally:
            shm.close()  # the parent unlinks it after copying


_STOP = object()


def _from_shm(result):
    if isinstance(result, tuple) and result == ("stop",):
        return _STOP
    if not (isinstance(result, tuple) and result and result[0] == "shm"):
        return result
    from multiprocessing import shared_memory

    _, name, shape, dtype = result
    shm = shared_memory.SharedMemory(name=name)
    try:
        return np.ndarray(shape, np.dtype(dtype), buffer=shm.buf).copy()
    finally:
        shm.close()
        shm.unlink()


def _is_iterable_source(source) -> bool:
    return inspect.isgeneratorfunction(source) or (
        hasattr(source, "__iter__") and not callable(source)
    )


def _make_iter(source):
    return source() if inspect.isgeneratorfunction(source) else iter(source)


def _num_params(fn) -> int:
    try:
        return len(
            [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        )
    except (TypeError, ValueError):
        return 0
