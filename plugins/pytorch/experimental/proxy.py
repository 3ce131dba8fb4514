"""A dlpipe pipeline behind a PyTorch ``DataLoader`` (DALI's
``nvidia.dali.plugin.pytorch.experimental.proxy``).

The torch Dataset keeps doing what it does in its worker processes (listing files, reading
labels, light per-sample work), but hands the heavy part to one pipeline that runs in the main
process, on the GPU, with one CUDA context:

* ``DALIServer(pipe).proxy`` is a callable with one parameter per ``external_source`` of the
  pipeline (positional when there is one). Used as the Dataset's transform, it records its
  arguments in the worker and returns a placeholder, a :class:`DALIOutputSampleRef` (a tuple
  of them for a pipeline of several outputs).
* Torch's ``default_collate`` (this module registers a rule in ``default_collate_fn_map``)
  turns the samples' placeholders into a :class:`DALIOutputBatchRef` and sends the batch's
  inputs to the server through a multiprocessing queue, right away (or, with
  ``deterministic=True``, only when the main process asks for the batch, so the pipeline sees
  the batches in the loader's order).
* The server's thread feeds each batch to the pipeline's external sources and runs it once
  (:meth:`Pipeline._run_once`), keeping as many in flight as the executor works on at once
  (the prefetch depth, and with decode lanes a batch per lane and its spares), and queues the
  outputs as torch tensors (zero-copy: dlpipe never reuses a batch's memory).
* :class:`DataLoader` (a torch ``DataLoader`` that also takes the server) replaces the
  placeholders in each batch it yields with those tensors (:meth:`DALIServer.produce_data`),
  wherever they sit in the batch's structure (tuples, lists, dicts, named tuples, objects).
  It starts the server's thread if nobody did, and stops it at the end of the epoch if it
  started it.

Example:
    >>> @pipeline_def
    ... def train_pipe():
    ...     paths = fn.external_source(name="images", no_copy=True)
    ...     images = fn.decoders.image(fn.io.file.read(paths), device="mixed")
    ...     return fn.resize(images, size=[224, 224])
    >>> def read_filepath(path):
    ...     return np.frombuffer(path.encode(), dtype=np.int8)
    >>> pipe = train_pipe(batch_size=64, num_threads=4, device_id=0, prefetch_queue_depth=8)
    >>> with DALIServer(pipe) as server:
    ...     dataset = torchvision.datasets.ImageFolder(
    ...         root, transform=server.proxy, loader=read_filepath
    ...     )
    ...     loader = DataLoader(server, dataset, batch_size=64, num_workers=4, drop_last=True)
    ...     for images, labels in loader:
    ...         ...

Choices where DALI's behaviour is not spelled out: :class:`DataLoader` also works with
``num_workers=0`` (the proxy then runs in the main process; DALI's class needs workers), and
the server thread waits for requests in 0.1 s slices, so stopping it takes at most that long.
"""

from __future__ import annotations

import queue
import threading
from inspect import Parameter, Signature
from typing import Any

import torch.multiprocessing as mp
from torch.utils import data as torchdata
from torch.utils.data._utils.collate import default_collate_fn_map
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter, _SingleProcessDataLoaderIter

from dlpipe.pipeline import Pipeline
from dlpipe.plugins.pytorch import to_torch

__all__ = [
    "DALIOutputBatchRef",
    "DALIOutputSampleRef",
    "DALIPipelineRunRef",
    "DALIServer",
    "DataLoader",
]

_POLL_S = 0.1  # how long the server thread waits for a request before checking for stop()


class DALIPipelineRunRef:
    """One pipeline iteration asked for by a worker.

    Attributes:
        batch_id: (loader generation, worker id, that worker's batch index): unique per
            server, across epochs too (each epoch's workers count their batches from 0).
        call_args: external source name -> list of per-sample inputs (emptied once the batch
            is sent to the server).
        is_scheduled: the inputs went to the server.
        is_complete: the batch was collated (no sample will be added).
    """

    def __init__(self, batch_id: tuple):
        self.batch_id = batch_id
        self.call_args: dict[str, list] = {}
        self.is_scheduled = False
        self.is_complete = False

    def __repr__(self) -> str:
        return (
            f"DALIPipelineRunRef(batch_id={self.batch_id}, call_args={self.call_args} "
            f"is_scheduled={self.is_scheduled}, is_complete={self.is_complete})"
        )


class DALIOutputSampleRef:
    """What the proxy returns for one sample: output ``output_idx`` of sample ``sample_idx``
    of the iteration ``pipe_run_ref``."""

    def __init__(self, proxy, pipe_run_ref: DALIPipelineRunRef, output_idx: int, sample_idx: int):
        self.proxy = proxy
        self.pipe_run_ref = pipe_run_ref
        self.output_idx = output_idx
        self.sample_idx = sample_idx

    def __repr__(self) -> str:
        return (
            f"DALIOutputSampleRef({self.pipe_run_ref}, output_idx={self.output_idx}, "
            f"sample_idx={self.sample_idx})"
        )


class DALIOutputBatchRef:
    """A collated batch's placeholder: output ``output_idx`` of the iteration
    ``pipe_run_ref``; :meth:`DALIServer.produce_data` replaces it with the tensor."""

    def __init__(self, pipe_run_ref: DALIPipelineRunRef, output_idx: int):
        self.pipe_run_ref = pipe_run_ref
        self.output_idx = output_idx

    def __repr__(self) -> str:
        return f"DALIOutputBatchRef(pipe_run_ref={self.pipe_run_ref}, output_idx={self.output_idx})"


def _collate_dali_output_sample_ref_fn(samples, *, collate_fn_map=None):
    """Collate the placeholders of one batch: they must come from one iteration, in sample
    order. Marks the iteration complete and (unless deterministic) sends it to the server."""
    if not samples:
        raise RuntimeError("cannot collate an empty batch of DALIOutputSampleRef")
    first = samples[0]
    run_ref, output_idx, proxy = first.pipe_run_ref, first.output_idx, first.proxy
    for i, sample in enumerate(samples):
        if (
            sample.proxy is not proxy
            or sample.pipe_run_ref is not run_ref
            or sample.output_idx != output_idx
        ):
            raise RuntimeError("All samples should belong to the same batch")
        if sample.sample_idx != i:
            raise RuntimeError("Unexpected sample order")
    run_ref.is_complete = True
    if not proxy._deterministic and not run_ref.is_scheduled:
        proxy._schedule_batch(run_ref)
    return DALIOutputBatchRef(run_ref, output_idx)


# torch's default_collate (and default_convert's users) find the rule for the placeholders here.
default_collate_fn_map.update({DALIOutputSampleRef: _collate_dali_output_sample_ref_fn})


class _WorkerData:
    def __init__(self, worker_id):
        self.worker_id = worker_id
        self.pipe_run_ref: DALIPipelineRunRef | None = None
        self.next_worker_batch_idx = 0
        self.batch_sample_idx = 0


class _DALIProxy:
    """The callable a Dataset uses as its transform (see :attr:`DALIServer.proxy`)."""

    def __init__(self, signature: Signature, num_outputs: int, dali_input_q, deterministic):
        self._signature = signature
        self.__signature__ = signature
        self._num_outputs = num_outputs
        self._dali_input_q = dali_input_q
        self._deterministic = deterministic
        self._worker_data: _WorkerData | None = None
        self._generation = 0  # bumped by the DataLoader before each epoch's workers start

    def __call__(self, *args, **kwargs):
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as err:
            args_str = ", ".join(str(type(a)) for a in args)
            kwargs_str = ", ".join(f"{k}={type(v)}" for k, v in kwargs.items())
            raise ValueError(
                f"Expected signature is: {self._signature}. Got: args=({args_str}), "
                f"kwargs={kwargs_str}, error: {err}"
            ) from None
        return self._add_sample(bound.arguments)

    @staticmethod
    def _worker_id():
        info = torchdata.get_worker_info()
        return info.id if info is not None else threading.get_ident()

    def _add_sample(self, inputs: dict):
        """Add one sample to this worker's current batch (a new one after each collate)."""
        if self._worker_data is None:
            self._worker_data = _WorkerData(self._worker_id())
        wd = self._worker_data
        if wd.pipe_run_ref is None or wd.pipe_run_ref.is_complete:
            wd.pipe_run_ref = DALIPipelineRunRef(
                (self._generation, wd.worker_id, wd.next_worker_batch_idx)
            )
            wd.next_worker_batch_idx += 1
            wd.batch_sample_idx = 0
        for name, value in inputs.items():
            wd.pipe_run_ref.call_args.setdefault(name, []).append(value)
        refs = tuple(
            DALIOutputSampleRef(self, wd.pipe_run_ref, i, wd.batch_sample_idx)
            for i in range(self._num_outputs)
        )
        wd.batch_sample_idx += 1
        return refs[0] if len(refs) == 1 else refs

    def _schedule_batch(self, pipe_run_ref: DALIPipelineRunRef) -> DALIPipelineRunRef:
        """Send a collated batch's inputs to the server; the placeholders keep the id only."""
        if not pipe_run_ref.call_args:
            raise RuntimeError("No inputs for the pipeline to run (was it already scheduled?)")
        if not pipe_run_ref.is_complete:
            raise RuntimeError("Batch is not marked as complete")
        item = DALIPipelineRunRef(pipe_run_ref.batch_id)
        item.call_args = pipe_run_ref.call_args
        item.is_complete = item.is_scheduled = True
        self._dali_input_q.put(item)
        pipe_run_ref.call_args = {}
        pipe_run_ref.is_scheduled = True
        return pipe_run_ref


def _num_outputs(pipe: Pipeline) -> int:
    """The number of outputs of the graph, without starting the pipeline's executor (its
    threads would be forked with the workers)."""
    if pipe._outputs is None:
        pipe.build()
    return len(pipe._outputs)


def _external_source_names(pipe: Pipeline) -> list[str]:
    """The names of the pipeline's external sources, in the order they were added."""
    if not pipe._ops and pipe._has_define_graph():
        pipe.build()
    return [node.name for node in pipe._ops if node.op.schema == "external_source"]


class DALIServer:
    """Runs a pipeline whose inputs are ``external_source`` nodes on behalf of a torch
    ``DataLoader``'s workers (see the module's docstring).

    Args:
        pipeline: the pipeline; each of its external sources becomes a parameter of
            :attr:`proxy`, by its name.
        deterministic: send a batch to the pipeline only when the main process asks for it,
            in the loader's order: reproducible results for pipelines with state (random
            operators), at the cost of overlap between the workers and the pipeline.

    Raises:
        TypeError: ``pipeline`` is not a dlpipe Pipeline.
        RuntimeError: the pipeline has no external source.

    Example:
        >>> with DALIServer(pipe) as server:
        ...     out0, out1 = server.proxy(a=np.ones(3), b=np.zeros(3))
        ...     batch = torch.utils.data.default_collate([(out0, out1)])
        ...     a_plus_b, b_minus_a = server.produce_data(batch)
    """

    def __init__(self, pipeline: Pipeline, deterministic: bool = False):
        if not isinstance(pipeline, Pipeline):
            raise TypeError(f"Expected a dlpipe pipeline, got: {pipeline!r}")
        self._pipe = pipeline
        self._dali_input_names = _external_source_names(pipeline)
        if not self._dali_input_names:
            raise RuntimeError("The provided pipeline doesn't have any inputs")
        kind = (
            Parameter.POSITIONAL_OR_KEYWORD
            if len(self._dali_input_names) == 1
            else Parameter.KEYWORD_ONLY
        )
        self._signature = Signature([Parameter(n, kind) for n in self._dali_input_names])
        self._dali_input_q = mp.Queue()  # workers -> server thread
        self._dali_output_q: queue.Queue = queue.Queue()  # server thread -> main thread
        self._thread: threading.Thread | None = None
        self._thread_stop_event: threading.Event | None = None
        self._cache_outputs: dict = {}
        self._deterministic = deterministic
        self._proxy: _DALIProxy | None = None
        self._generation = 0
        # Batches fed to the pipeline whose outputs are not taken yet, oldest first; kept
        # across stop/start so a restarted thread still pairs outputs with their batches.
        self._fed: list = []

    def __del__(self):
        self.stop_thread()

    @property
    def proxy(self) -> _DALIProxy:
        """The callable to use as the Dataset's transform (one object per server)."""
        if self._proxy is None:
            self._proxy = _DALIProxy(
                self._signature, _num_outputs(self._pipe), self._dali_input_q, self._deterministic
            )
        return self._proxy

    # --- main process: outputs ---------------------------------------------------------------
    def _get_outputs(self, pipe_run_ref: DALIPipelineRunRef) -> tuple:
        """The outputs of one iteration: read the server's queue until they come, keeping the
        others for later calls."""
        req = pipe_run_ref.batch_id
        if not pipe_run_ref.is_scheduled:  # deterministic: sent only now, in loader order
            self._dali_input_q.put(pipe_run_ref)
            pipe_run_ref.is_scheduled = True
        if req in self._cache_outputs:
            return self._cache_outputs.pop(req)
        while True:
            batch_id, outputs, err = self._dali_output_q.get()
            if batch_id[0] < self._generation:
                continue  # a batch of an epoch left early: nobody will ask for it
            if err is not None:
                raise err
            if batch_id == req:
                return outputs
            self._cache_outputs[batch_id] = outputs

    def _new_generation(self) -> None:
        """A loader starts an epoch with new workers: their batch ids start a new generation,
        and outputs of earlier ones (an epoch left early) are dropped."""
        self._generation += 1
        self.proxy._generation = self._generation
        self._cache_outputs = {
            k: v for k, v in self._cache_outputs.items() if k[0] >= self._generation
        }

    def produce_data(self, obj):
        """Replace every :class:`DALIOutputBatchRef` in ``obj`` (nested in lists, tuples,
        named tuples, dicts or object attributes, cycles allowed) with the pipeline's output.
        Lists, dicts and objects are changed in place; tuples are rebuilt.

        Returns:
            ``obj`` with the placeholders replaced.
        """
        return self._produce(obj, {}, {})

    @staticmethod
    def _needs(obj, seen: dict) -> bool:
        key = id(obj)
        if key in seen:
            return seen[key]
        if isinstance(obj, DALIOutputBatchRef):
            seen[key] = True
            return True
        seen[key] = False  # provisional: breaks cycles
        if isinstance(obj, list | tuple):
            items = obj
        elif isinstance(obj, dict):
            items = obj.values()
        else:
            items = getattr(obj, "__dict__", {}).values()
        found = any(DALIServer._needs(item, seen) for item in items)
        seen[key] = found
        return found

    def _produce(self, obj, done: dict, seen: dict):
        key = id(obj)
        if key in done:
            return done[key]
        if not self._needs(obj, seen):
            done[key] = obj
            return obj
        if isinstance(obj, DALIOutputBatchRef):
            run_key = ("run", id(obj.pipe_run_ref))
            if run_key not in done:
                done[run_key] = self._get_outputs(obj.pipe_run_ref)
            done[key] = done[run_key][obj.output_idx]
            return done[key]
        if isinstance(obj, list):
            done[key] = obj
            for i, item in enumerate(obj):
                obj[i] = self._produce(item, done, seen)
            return obj
        if isinstance(obj, tuple):
            items = [self._produce(item, done, seen) for item in obj]
            if hasattr(obj, "_fields"):  # a named tuple
                res = type(obj)(*items)
            else:
                res = type(obj)(items)
            done[key] = res
            return res
        if isinstance(obj, dict):
            done[key] = obj
            for k in list(obj):
                obj[k] = self._produce(obj[k], done, seen)
            return obj
        done[key] = obj
        for name, value in list(obj.__dict__.items()):
            setattr(obj, name, self._produce(value, done, seen))
        return obj

    # --- the server thread ------------------------------------------------------------------
    def _depth(self) -> int:
        """Iterations the server keeps fed and not yet taken. DALI's proxy keeps the prefetch
        depth; dlpipe's executor works on more at once where its lanes decode whole batches
        (``Executor.capacity``), and with only the prefetch depth fed a batch waits for one
        lane's decoding while the other lanes idle (BENCHMARKS.md "The proxy's batches in
        flight")."""
        pipe = self._pipe
        if not pipe.exec_pipelined:
            return 1
        pipe.build()
        return max(1, pipe._executor.capacity())

    def _get_input_batches(self, max_batches: int, timeout: float | None) -> list | None:
        batches = []
        if timeout is not None:
            try:
                batches.append(self._dali_input_q.get(timeout=timeout))
            except queue.Empty:
                return None
        while len(batches) < max_batches:
            try:
                batches.append(self._dali_input_q.get_nowait())
            except queue.Empty:
                break
        return batches

    def _thread_fn(self) -> None:
        """Feed the batches that arrive (up to the prefetch depth in flight), run each once,
        and hand the oldest one's outputs (or its error) to the main thread."""
        fed = self._fed
        depth = self._depth()
        stop = self._thread_stop_event
        while not stop.is_set():
            batches = self._get_input_batches(depth - len(fed), None if fed else _POLL_S)
            for run_ref in batches or ():
                try:
                    for name, data in run_ref.call_args.items():
                        self._pipe.feed_input(name, data)
                    self._pipe._run_once()
                except Exception as err:
                    self._dali_output_q.put((run_ref.batch_id, None, err))
                    continue
                fed.append(run_ref.batch_id)
            if not fed:
                continue
            batch_id = fed.pop(0)
            outputs, err = None, None
            try:
                outputs = tuple(to_torch(out) for out in self._pipe.outputs())
            except Exception as exc:
                err = exc
            self._dali_output_q.put((batch_id, outputs, err))

    def start_thread(self) -> None:
        """Start the pipeline thread (``with server:`` does it for you)."""
        if self._thread is not None:
            return
        self._thread_stop_event = threading.Event()
        self._thread = threading.Thread(target=self._thread_fn, name="dlpipe-proxy", daemon=True)
        self._thread.start()

    def stop_thread(self) -> None:
        """Stop the pipeline thread (``with server:`` does it for you)."""
        if getattr(self, "_thread_stop_event", None) is None:  # also: __init__ raised
            return
        self._thread_stop_event.set()
        self._thread.join()
        self._thread = None
        self._thread_stop_event = None

    def _is_thread_running(self) -> bool:
        return self._thread is not None

    def __enter__(self) -> DALIServer:
        self.start_thread()
        return self

    def __exit__(self, exc_type, exc_value, tb) -> bool:
        self.stop_thread()
        return False


class _ProxyIterMixin:
    """``_next_data`` of a torch loader iterator, with the placeholders replaced."""

    _proxy_loader: DataLoader

    def _next_data(self):
        loader = self._proxy_loader
        loader.ensure_server_listening()
        try:
            data = super()._next_data()
        except StopIteration:
            loader._stop_server_if_started()
            raise
        return loader.dali_server.produce_data(data)


class _MultiProcessIter(_ProxyIterMixin, _MultiProcessingDataLoaderIter):
    def __init__(self, loader):
        self._proxy_loader = loader
        super().__init__(loader)


class _SingleProcessIter(_ProxyIterMixin, _SingleProcessDataLoaderIter):
    def __init__(self, loader):
        self._proxy_loader = loader
        super().__init__(loader)


class DataLoader(torchdata.DataLoader):
    """A torch ``DataLoader`` whose batches come back with the pipeline's outputs in place of
    the proxy's placeholders.

    Args:
        dali_server: the :class:`DALIServer` whose ``proxy`` the dataset calls.
        *args, **kwargs: as for ``torch.utils.data.DataLoader`` (``num_workers``,
            ``pin_memory``, ``drop_last``, ``shuffle``, ...).
    """

    def __init__(self, dali_server: DALIServer, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.dali_server = dali_server
        self.server_started_by_loader = False

    def __del__(self):
        server = getattr(self, "dali_server", None)
        if self.__dict__.get("server_started_by_loader") and server._is_thread_running():
            server.stop_thread()

    def ensure_server_listening(self) -> None:
        """Start the server's thread unless it runs."""
        if not self.dali_server._is_thread_running():
            self.dali_server.start_thread()
            self.server_started_by_loader = True

    def _stop_server_if_started(self) -> None:
        if self.server_started_by_loader and self.dali_server._is_thread_running():
            self.dali_server.stop_thread()
        self.server_started_by_loader = False

    def _get_iterator(self):
        # before the workers start: they take the proxy (and its generation) with them
        self.dali_server._new_generation()
        if self.num_workers > 0:
            return _MultiProcessIter(self)
        return _SingleProcessIter(self)
