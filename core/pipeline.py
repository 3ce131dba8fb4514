"""``Pipeline`` and ``pipeline_def``: graph capture, build, run, reader metadata.

Example:
    >>> from dlpipe import pipeline_def, fn
    >>> @pipeline_def(batch_size=32, num_threads=4, device_id=0)
    ... def pipe(root):
    ...     jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="Reader")
    ...     images = fn.decoders.image(jpegs, device="cpu")
    ...     return fn.resize(images, size=(224, 224)), labels
    >>> p = pipe("/data/train")
    >>> images, labels = p.run()
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._argcheck import CPU_ONLY_DEVICE_ID, check_bool, check_int, is_int
from ._malloc import tune_malloc
from ._skiplog import SkippedList
from .errors import ArgumentError, ArgumentTypeError, PipelineError
from .executor import Executor
from .graph import (
    BuildContext,
    DataNode,
    OpNode,
    current_pipeline,
    pop_pipeline,
    push_pipeline,
)
from .operators.arithmetic import fuse_expressions
from .options import RuntimeOptions, set_switch_interval
from .types import to_dali_dtype

DEFAULT_LANES = 2  # see max_streams; measured on an H100 in BENCHMARKS.md
PROCESS_LANES = 3  # the same, when every GPU decoder decodes in processes of its own
# ... but 2 when that would leave each lane's decoder fewer CPU threads (num_threads // lanes)
# than this: at 8 threads two lanes were faster and held ~470 MiB less (BENCHMARKS.md,
# "Decoding straight into the slot")
MIN_DECODER_THREADS = 3


def default_lanes(in_processes: bool, num_threads: int) -> int:
    """Decode lanes when neither ``max_streams`` nor ``RuntimeOptions.lanes`` sets them."""
    if not in_processes:
        return DEFAULT_LANES
    if num_threads // PROCESS_LANES < MIN_DECODER_THREADS:
        return DEFAULT_LANES
    return PROCESS_LANES


def _parse_queue_depth(depth, exec_async: bool) -> tuple[int, int, bool]:
    if isinstance(depth, dict):
        if not exec_async:
            raise ArgumentError(
                "prefetch_queue_depth as a dict (separated queues) needs exec_async=True"
            )
        unknown = set(depth) - {"cpu_size", "gpu_size"}
        if unknown:
            raise ArgumentError(f"prefetch_queue_depth: unknown keys {sorted(unknown)}")
        cpu, gpu = (
            check_int(depth.get(k, 2), f"prefetch_queue_depth[{k!r}]", minimum=1)
            for k in ("cpu_size", "gpu_size")
        )
        return cpu, gpu, True
    if not is_int(depth):
        raise ArgumentTypeError(
            f"Pipeline: prefetch_queue_depth={depth!r} must be an int or a dict with "
            "cpu_size/gpu_size"
        )
    depth = check_int(depth, "prefetch_queue_depth", minimum=1)
    return depth, depth, False


class Pipeline:
    """A data-processing graph and the engine that runs it.

    Args:
        batch_size: the maximum (and, for readers, the actual) number of samples per batch.
        num_threads: CPU worker threads for per-sample operators.
        device_id: the GPU to use for mixed/GPU operators. A graph with CPU operators only
            never touches CUDA, whatever this is, so ``device_id=0`` works on a machine without
            a GPU (DALI refuses that).
        seed: the pipeline seed; each operator without its own ``seed=`` takes the next seed
            derived from it, in the order operators were added. ``None`` or -1: random.
        exec_pipelined, exec_async: with both True (default) stages run on background threads
            with ``prefetch_queue_depth`` iterations in flight; otherwise ``run()`` is
            synchronous.
        prefetch_queue_depth: an int, or ``{"cpu_size": x, "gpu_size": y}``.
        output_dtype, output_ndim: optional expected type / rank per output (a single value
            applies to all); a mismatch raises after the iteration.
        max_streams: CUDA streams the executor may use (-1: no limit). The GPU stage uses one;
            with more, the GPU decoders of ``max_streams - 1`` iterations run at once, each on
            its own stream and decoder (``executor_gpu.py``; when unlimited, 3 where the
            decoders decode in processes of their own, as on Linux by default, else 2). The
            CPU stage then reads two iterations per lane more than ``prefetch_queue_depth``
            ahead for them (encoded bytes on the host, not extra output batches; see
            ``Executor``). ``max_streams=1``: decoding runs on the GPU stage's own thread and
            stream.
        Other DALI arguments (``bytes_per_sample``, ``set_affinity``,
        ``default_cuda_stream_priority``, ``exec_dynamic``, ``enable_memory_stats``) are
        accepted as hints.
        py_num_workers, py_start_method: worker processes for ``external_source(parallel=True)``.
        runtime: the runtime layer's options (:class:`~dlpipe.options.RuntimeOptions`: helper
            processes, decode lanes, ...), a dlpipe extension; by default
            ``RuntimeOptions.from_env()``, read once here.
        enable_checkpointing: keep the state needed by :meth:`checkpoint` (cheap: RNG states
            and reader positions, taken once per iteration).
        checkpoint: restore from what :meth:`checkpoint` returned (bytes, or a file path): the
            pipeline then yields exactly what the checkpointed one would have yielded next.
            The graph must be the same.

    Raises:
        ArgumentTypeError: an argument of the wrong type, named with its value
            (``batch_size='8' is a str; pass an int (argparse: type=int)``); also a TypeError.
        ArgumentError: a value out of range (``prefetch_queue_depth=0 must be >= 1``).
    """

    def __init__(
        self,
        batch_size: int = -1,
        num_threads: int = -1,
        device_id: int | None = None,
        seed: int | None = None,
        exec_pipelined: bool = True,
        prefetch_queue_depth: int | dict = 2,
        exec_async: bool = True,
        bytes_per_sample: int = 0,
        set_affinity: bool = False,
        max_streams: int = -1,
        default_cuda_stream_priority: int = 0,
        *,
        enable_memory_stats: bool = False,
        enable_checkpointing: bool = False,
        checkpoint: bytes | str | None = None,
        py_num_workers: int = 1,
        py_start_method: str = "fork",
        exec_dynamic: bool | None = None,
        output_dtype=None,
        output_ndim=None,
        runtime: RuntimeOptions | None = None,
    ):
        if runtime is not None and not isinstance(runtime, RuntimeOptions):
            raise ArgumentTypeError(f"runtime={runtime!r} must be a dlpipe.options.RuntimeOptions")
        # Types and ranges here, naming the argument (argparse hands out strings); -1 is
        # DALI's "not given" for batch_size and num_threads, checked again by build()
        batch_size = check_int(batch_size, "batch_size", minimum=1, allowed=(-1,))
        num_threads = check_int(num_threads, "num_threads", minimum=1, allowed=(-1,))
        if device_id is not None:
            device_id = check_int(device_id, "device_id", minimum=0, allowed=(CPU_ONLY_DEVICE_ID,))
        if seed is not None:
            seed = check_int(seed, "seed")
        max_streams = check_int(max_streams, "max_streams", minimum=1, allowed=(-1,))
        check_int(bytes_per_sample, "bytes_per_sample", minimum=0)
        check_int(default_cuda_stream_priority, "default_cuda_stream_priority")
        py_num_workers = check_int(py_num_workers, "py_num_workers", minimum=1)
        exec_pipelined = check_bool(exec_pipelined, "exec_pipelined")
        exec_async = check_bool(exec_async, "exec_async")
        enable_checkpointing = check_bool(enable_checkpointing, "enable_checkpointing")
        for flag, value in (
            ("set_affinity", set_affinity),
            ("enable_memory_stats", enable_memory_stats),
            ("exec_dynamic", exec_dynamic),
        ):
            if value is not None:
                check_bool(value, flag)
        if checkpoint is not None and not isinstance(checkpoint, bytes | bytearray | str):
            raise ArgumentTypeError(
                f"Pipeline: checkpoint={type(checkpoint).__name__} must be the bytes that "
                "checkpoint() returned or a file path (str)"
            )
        if output_ndim is not None:
            for d in output_ndim if isinstance(output_ndim, list | tuple) else [output_ndim]:
                if d is not None:
                    check_int(d, "output_ndim", minimum=0)
        self._runtime = runtime if runtime is not None else RuntimeOptions.from_env()
        self._max_batch_size = batch_size
        self._max_streams = max_streams
        self._num_threads = num_threads
        self._device_id = device_id
        if seed is None or seed == -1:
            seed = int(time.time_ns() % (2**31))
        elif seed < 0:
            warnings.warn(f"seed={seed} is negative; using its absolute value", stacklevel=2)
            seed = -seed
        self._seed = int(seed)
        self._exec_pipelined = exec_pipelined
        self._exec_async = exec_async
        self._cpu_size, self._gpu_size, self._separated = _parse_queue_depth(
            prefetch_queue_depth, exec_async
        )
        self._prefetch_queue_depth = prefetch_queue_depth
        self._output_dtype = output_dtype
        self._output_ndim = output_ndim
        if py_start_method not in ("fork", "spawn", "forkserver"):
            raise ValueError(f"{py_start_method=} must be 'fork', 'spawn' or 'forkserver'")
        self._py_num_workers = py_num_workers
        self._py_start_method = py_start_method
        self._sources: dict[str, Any] = {}
        self._ended = False
        self._setup_ended = False
        if checkpoint is not None and not enable_checkpointing:
            raise ValueError("checkpoint= needs enable_checkpointing=True")
        self._enable_checkpointing = enable_checkpointing
        self._checkpoint_in = checkpoint
        self._restored = checkpoint is not None  # as in DALI: set by the constructor
        self._iterator_data = None
        self._stateful: list[OpNode] = []
        self._initial_state: list | None = None
        self._ops: list[OpNode] = []
        self._outputs: list[DataNode] | None = None
        self._built = False
        self._executor: Executor | None = None
        self._shared: tuple | None = None
        self._api_type: str | None = None
        self._readers: dict[str, Any] = {}
        self._epoch_idx = 0

    # --- properties -----------------------------------------------------------------------
    @property
    def max_batch_size(self) -> int:
        return self._max_batch_size

    @property
    def batch_size(self) -> int:
        return self._max_batch_size

    @property
    def num_threads(self) -> int:
        return self._num_threads

    @property
    def runtime(self) -> RuntimeOptions:
        """The runtime options this pipeline runs with (``dlpipe.options``)."""
        return self._runtime

    @property
    def device_id(self) -> int | None:
        return self._device_id

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def exec_pipelined(self) -> bool:
        return self._exec_pipelined

    @property
    def exec_async(self) -> bool:
        return self._exec_async

    @property
    def prefetch_queue_depth(self):
        return self._prefetch_queue_depth

    @property
    def cpu_queue_size(self) -> int:
        return self._cpu_size

    @property
    def gpu_queue_size(self) -> int:
        return self._gpu_size

    @property
    def exec_separated(self) -> bool:
        return self._separated

    @property
    def num_outputs(self) -> int:
        """How many outputs each ``run()`` returns (builds the pipeline)."""
        self.build()
        return len(self._outputs)

    @property
    def output_devices(self) -> list[str]:
        """ "cpu" or "gpu" per output (builds the pipeline)."""
        self.build()
        return [x.device for x in self._outputs]

    # --- graph definition -----------------------------------------------------------------
    def __enter__(self) -> Pipeline:
        push_pipeline(self)
        return self

    def __exit__(self, *exc) -> None:
        pop_pipeline()

    @staticmethod
    def current() -> Pipeline | None:
        return current_pipeline()

    @staticmethod
    def push_current(pipe: Pipeline) -> None:
        push_pipeline(pipe)

    @staticmethod
    def pop_current() -> Pipeline:
        return pop_pipeline()

    def _next_op_id(self) -> int:
        return len(self._ops)

    def _add_op(self, node: OpNode) -> None:
        if self._built:
            raise PipelineError("cannot add operators to a pipeline that is already built")
        if any(n.name == node.name for n in self._ops):
            raise ArgumentError(f"operator name {node.name!r} is used twice in this pipeline")
        self._ops.append(node)

    def set_outputs(self, *outputs: DataNode) -> None:
        """Fix the pipeline outputs (CPU or GPU DataNodes)."""
        if self._has_define_graph():
            raise PipelineError("Duplicate graph definition: define_graph and set_outputs")
        for i, x in enumerate(outputs):
            if not isinstance(x, DataNode):
                raise ArgumentError(f"output {i} must be a DataNode, got {type(x).__name__}")
        self._outputs = list(outputs)

    def define_graph(self):
        """Override in a subclass (legacy style) to return the output DataNodes."""
        raise NotImplementedError

    def iter_setup(self) -> None:
        """Deprecated DALI hook (legacy subclasses): called before each iteration is queued,
        typically to ``feed_input`` the next batch; raise StopIteration at the end of the data."""

    def _has_define_graph(self) -> bool:
        return type(self).define_graph is not Pipeline.define_graph

    # --- build ---------------------------------------------------------------------------
    def build(self) -> None:
        """Check the graph and start the executor. Optional: the first use builds it."""
        if self._built:
            return
        if self._max_batch_size is None or self._max_batch_size < 1:
            raise ArgumentError(f"batch_size={self._max_batch_size} must be >= 1")
        if self._num_threads is None or self._num_threads < 1:
            raise ArgumentError(f"num_threads={self._num_threads} must be >= 1")
        if self._has_define_graph():
            with self:
                outs = self.define_graph()
            if isinstance(outs, DataNode):
                outs = [outs]
            self._outputs = list(outs)
        if self._outputs is None:
            raise PipelineError(
                "the pipeline has no outputs: call set_outputs() or use @pipeline_def"
            )
        ops = fuse_expressions(self._reachable_ops(), self._outputs)  # one op per expression
        seeds = np.random.SeedSequence(self._seed).generate_state(max(1, len(self._ops)), np.uint32)
        for i, node in enumerate(self._ops):
            op = node.op
            if op.is_random:
                op.bind_rng(op.seed if op.seed is not None and op.seed >= 0 else int(seeds[i]))
        for node in self._ops:  # input sets of one call draw the same numbers (graph.py)
            source = node.op.seed_source
            if node.op.is_random and source is not None and source.rng is not None:
                node.op.rng.bit_generator.state = source.rng.bit_generator.state
        for node in ops:
            if node.op.is_reader:  # by instance name: name=, or the generated one (DALI)
                self._readers[node.name] = node.op
            if node.op.provides_batch:
                self._sources[node.name] = node
                node.op.start_workers(self._py_num_workers, self._py_start_method)
        ctx = BuildContext(self._device_id, self._max_batch_size, self._num_threads, self._runtime)
        if self._num_threads > 1:  # per-sample buffers of MBs: reuse heap memory (_malloc.py)
            tune_malloc(self._runtime.malloc_tuning)
        for node in ops:
            node.op.prepare(ctx)
        layouts = self._layouts(ops)
        cpu_ops = [n for n in ops if n.device == "cpu"]
        gpu_ops = [n for n in ops if n.device != "cpu"]
        gpu_stage = None
        if gpu_ops or any(x.device == "gpu" for x in self._outputs):
            from .executor_gpu import GpuStage

            set_switch_interval(self._runtime.gil_switch_interval)

            lanes = max(0, self._max_streams - 1)
            if self._max_streams < 0 and self._runtime.lanes is not None:
                lanes = self._runtime.lanes
            elif self._max_streams < 0:
                in_processes = any(getattr(n.op, "decode_process", False) for n in gpu_ops)
                lanes = default_lanes(in_processes, self._num_threads)
            gpu_stage = GpuStage(
                self._device_id, gpu_ops, self._outputs, layouts, lanes, self._num_threads
            )
        depth = self._cpu_size + (self._gpu_size if self._separated else 0)
        snapshot = None
        if self._enable_checkpointing:
            for node in ops:
                node.op.checkpointing_enabled()
            self._stateful = [n for n in ops if n.op.state_dict() is not None]
            if self._checkpoint_in is not None:
                self._restore(self._checkpoint_in)
            snapshot = self._snapshot
            self._initial_state = self._snapshot()
        self._executor = Executor(
            cpu_ops,
            self._outputs,
            layouts,
            self._max_batch_size,
            self._num_threads,
            depth if self._exec_pipelined else 1,
            self._exec_async and self._exec_pipelined,
            gpu_stage,
            snapshot,
            gpu_ops,
            # The CPU stage runs ahead of the lanes by as many iterations again, so that a lane
            # never waits for it (BENCHMARKS.md, fifth session); only where that cannot change
            # what is read: not from external sources (feed_input / callbacks expect DALI's
            # prefetch count).
            0 if gpu_stage is None or self._sources else 2 * gpu_stage.lanes,
            decoded_spare=self._runtime.decoded_spare,
            skipped_history=self._runtime.skipped_history,
            sample_processes=self._sample_process_count(),
            upload_area_bytes=self._runtime.upload_area_mb << 20,
        )
        self._built = True
        self._pid = os.getpid()  # its threads and helper processes live in this process only

    def _sample_process_count(self) -> int:
        """Sample processes for the executor: one per thread up to the cores, where the
        options allow and helpers run here (``_sample_processes.py``)."""
        from ._ipc.process import supported

        if not (self._runtime.sample_processes and supported()) or self._num_threads < 2:
            return 0
        # the cores this process may run on (a container's or taskset's), not the machine's
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        return min(self._num_threads, cores or os.cpu_count() or 1)

    def _check_process(self) -> None:
        """Raise, rather than wait forever, when this process is a fork of the one that built
        the pipeline: the executor's threads and the helper processes stayed with the parent."""
        if self._pid != os.getpid():
            raise PipelineError(
                f"this pipeline was built in process {self._pid} and is used in process "
                f"{os.getpid()}, which forked from it: a built pipeline's threads and helper "
                "processes do not survive fork(). Build the pipeline in the child instead (in "
                "a torch DataLoader worker: build it in worker_init_fn or in the dataset's "
                "__iter__), or start workers with the 'spawn' or 'forkserver' method"
            )

    def _reachable_ops(self) -> list[OpNode]:
        seen: set[int] = set()
        stack = [x.source for x in self._outputs if x.source is not None]
        stack += [n for n in self._ops if n.op.preserve]  # preserve=True: never pruned
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack += [x.source for x in node.inputs if x.source is not None]
            stack += [x.source for x in node.arg_nodes.values() if x.source is not None]
        return [n for n in self._ops if id(n) in seen]  # creation order is topological

    @staticmethod
    def _layouts(ops: Sequence[OpNode]) -> dict[DataNode, str]:
        layouts: dict[DataNode, str] = {}
        for node in ops:
            ins = [layouts.get(x, "") for x in node.inputs]
            for dn, lay in zip(node.outputs, node.op.output_layouts(ins), strict=True):
                layouts[dn] = lay
        return layouts

    # --- running -------------------------------------------------------------------------
    def _set_api(self, kind: str) -> None:
        if self._api_type is None:
            self._api_type = kind
        elif self._api_type != kind:
            raise PipelineError(
                f"Mixing pipeline API type: this pipeline is used through {self._api_type!r}, "
                f"now called through {kind!r}"
            )

    def _use_scheduled_api(self) -> None:
        """schedule_run/share_outputs/outputs: DALI's scheduled API (iterators use it too)."""
        if self._api_type != "iterator":
            self._set_api("scheduled")

    def run(self, **inputs) -> tuple:
        """Run one iteration and return its outputs: a tuple of TensorLists.

        Keyword arguments feed external sources by name (``pipe.run(images=batch)``); that needs
        ``prefetch_queue_depth=1`` or ``exec_pipelined=False``, since a pipelined first run
        would schedule more iterations than one batch feeds.
        """
        self._set_api("basic")
        if inputs:
            if self._exec_pipelined and self._cpu_size > 1:
                raise PipelineError(
                    "run() with inputs needs prefetch_queue_depth=1 or exec_pipelined=False"
                )
            for name, data in inputs.items():
                self.feed_input(name, data)
        self._schedule()
        return self._outputs_impl()

    def feed_input(
        self,
        data_node,
        data,
        layout: str | None = None,
        cuda_stream=None,
        use_copy_kernel: bool = False,
    ) -> None:
        """Give one batch to the external source ``data_node`` (its name or DataNode).

        Feed one batch per iteration that will be scheduled: the first run of a pipelined
        pipeline schedules ``prefetch_queue_depth`` iterations.
        """
        self.build()
        name = data_node if isinstance(data_node, str) else data_node.source.name
        node = self._sources.get(name)
        if node is None:
            raise ArgumentError(
                f"no external source named {name!r} (sources: {sorted(self._sources)})"
            )
        if node.op.source is not None:
            raise PipelineError(
                f"external source {name!r} has a source=; feed_input is not allowed"
            )
        if layout is None and callable(getattr(data, "layout", None)):
            layout = data.layout() or None  # a TensorList keeps its layout
        if layout is not None:  # outputs of later iterations carry it
            for out in node.outputs:
                self._executor.layouts[out] = layout
        node.op.fed.append(data)

    def schedule_run(self) -> None:
        """Queue an iteration (the first call queues ``prefetch_queue_depth`` of them)."""
        self._use_scheduled_api()
        self._schedule()

    def _run_once(self) -> None:
        """Queue exactly one iteration, whatever the prefetch depth (DALI's ``_run_once``):
        for a caller that feeds its external sources one batch at a time, as the PyTorch
        proxy (``plugins/pytorch/experimental/proxy.py``) does."""
        self._use_scheduled_api()
        self.build()
        self._executor.schedule(1)

    def _schedule(self) -> None:
        self.build()
        self._check_process()
        if type(self).iter_setup is Pipeline.iter_setup:
            self._executor.schedule()
            return
        # DALI calls iter_setup() before every iteration it queues (the first run queues the
        # whole depth); StopIteration from it ends the epoch until reset().
        count = 0
        for _ in range(self._executor.to_schedule()):
            if self._setup_ended:
                break
            try:
                self.iter_setup()
            except StopIteration:
                self._setup_ended = True
                break
            count += 1
        self._executor.schedule(count)

    def _prefetch(self) -> None:
        """Fill the prefetch queue: queue iterations until ``prefetch_queue_depth`` of them are
        pending (DALI's ``_prefetch``, which hand-written DALI iterators such as
        DeepLearningExamples' SSD one call before every ``share_outputs``; topping up keeps
        the queue bounded however often it is called)."""
        self._use_scheduled_api()
        self.build()
        ex = self._executor
        while ex.pending() < ex.depth:
            before = ex.pending()
            self._schedule()
            if ex.pending() == before:  # the end of the data, or iter_setup() ended the epoch
                break

    def share_outputs(self) -> tuple:
        """The next outputs, without giving the previous ones back."""
        self._use_scheduled_api()
        self.build()
        self._shared = self._get()
        return self._shared

    def release_outputs(self) -> None:
        """Give the shared outputs back (CPU batches stay valid: they are never reused)."""
        self._shared = None

    def outputs(self) -> tuple:
        """``release_outputs()`` then ``share_outputs()``."""
        self._use_scheduled_api()
        return self._outputs_impl()

    def _outputs_impl(self) -> tuple:
        self.release_outputs()
        self.build()
        return self._get()

    def _get(self) -> tuple:
        self._check_process()
        try:
            out = self._executor.get()
        except StopIteration:
            self._ended = True
            raise
        self._check_outputs(out)
        return out

    def _check_outputs(self, outs: tuple) -> None:
        for attr, check in (("_output_dtype", "dtype"), ("_output_ndim", "ndim")):
            want = getattr(self, attr)
            if want is None:
                continue
            wants = want if isinstance(want, list | tuple) else [want] * len(outs)
            for i, (tl, w) in enumerate(zip(outs, wants, strict=False)):
                if w is None:
                    continue
                got = tl.dtype if check == "dtype" else tl.ndim()
                if (check == "dtype" and got != to_dali_dtype(w)) or (check == "ndim" and got != w):
                    raise PipelineError(f"output {i}: expected {check} {w}, got {got}")

    def stats(self, reset: bool = False) -> dict:
        """Where the time goes: per-operator time (summed over worker threads), per-stage time,
        how long the consumer waited per batch, how many batches were ready on average, and a
        one-line ``verdict`` on whether the loader or the consumer is the bottleneck.

        Example:
            >>> s = pipe.stats()
            >>> print(s["verdict"]); print(s["operators"])
        """
        self.build()
        out = self._executor.profiler.stats()
        if reset:
            self._executor.profiler.reset()
        return out

    def trace(self, path: str) -> None:
        """Write a Chrome/Perfetto trace (JSON) of the recent stages, operators and consumer
        waits; open it at https://ui.perfetto.dev."""
        self.build()
        self._executor.profiler.write_trace(path)

    def skipped(self) -> SkippedList:
        """Samples dropped by operators with ``on_error="skip"``, oldest first: dicts with
        ``iteration``, ``sample`` (index in the batch), ``file``, ``operator`` and ``error``.

        Bounded: the list holds the most recent ``RuntimeOptions.skipped_history`` records
        (1000 by default); its ``total`` counts every skipped sample since the pipeline was
        built and ``by_operator`` splits that count by operator name.

        Example:
            >>> s = pipe.skipped()
            >>> print(s.total, s.by_operator, [r["file"] for r in s[-3:]])
        """
        if self._executor is None:
            return SkippedList()
        return self._executor.skipped.snapshot()

    # --- checkpoints ---------------------------------------------------------------------------
    @property
    def is_restored_from_checkpoint(self) -> bool:
        return self._restored

    @property
    def iterator_data(self):
        """What an iterator stored in the checkpoint this pipeline was restored from."""
        return self._iterator_data

    def _snapshot(self) -> list:
        return [n.op.state_dict() for n in self._stateful]

    def checkpoint(self, filename: str | None = None, iterator_data=None) -> bytes:
        """The pipeline's state after the last batch handed out (prefetched batches do not
        count), as bytes; also written to ``filename`` when given.

        Restore with ``Pipeline(..., enable_checkpointing=True, checkpoint=data)``: the restored
        pipeline continues with exactly the batches this one would have produced next. The
        format is JSON (RNG states, reader positions, external-source counters), so it is safe
        to load and easy to inspect.
        """
        if not self._enable_checkpointing:
            raise PipelineError("checkpoint() needs Pipeline(enable_checkpointing=True)")
        self.build()
        last = self._executor.last_state
        state = last if last is not None else self._initial_state
        data = json.dumps(
            {
                "format": "dlpipe-checkpoint",
                "version": 1,
                "epoch_idx": self._epoch_idx,
                "ops": [
                    {"name": n.name, "schema": n.op.schema, "state": st}
                    for n, st in zip(self._stateful, state, strict=True)
                ],
                "iterator_data": iterator_data,
            }
        ).encode()
        if filename is not None:
            with open(filename, "wb") as f:
                f.write(data)
        return data

    def _restore(self, checkpoint: bytes | str) -> None:
        if isinstance(checkpoint, str):
            with open(checkpoint, "rb") as f:
                checkpoint = f.read()
        try:
            data = json.loads(checkpoint)
            assert data["format"] == "dlpipe-checkpoint"
        except Exception as e:
            raise PipelineError(f"not a dlpipe checkpoint: {e}") from e
        saved = [(o["name"], o["schema"]) for o in data["ops"]]
        mine = [(n.name, n.op.schema) for n in self._stateful]
        if saved != mine:
            raise PipelineError(
                f"the checkpoint is of another pipeline: it holds {saved}, this one has {mine}"
            )
        for node, o in zip(self._stateful, data["ops"], strict=True):
            node.op.load_state_dict(o["state"])
        self._epoch_idx = data["epoch_idx"]
        self._iterator_data = data["iterator_data"]

    def empty(self) -> bool:
        """True when no scheduled iteration is waiting."""
        return self._executor is None or self._executor.pending() == 0

    def reset(self) -> None:
        """After an external source's StopIteration, start the next epoch (``epoch_idx`` + 1,
        callback indices from 0). Otherwise it does nothing: readers stream on (as in DALI)."""
        if not self._ended:
            return
        self._ended = False
        self._epoch_idx += 1
        if self._setup_ended:  # iter_setup() ended the data: the next run prefetches again
            self._setup_ended = False
            self._executor.rearm()
        for node in self._sources.values():
            node.op.reset_epoch()
        if self._enable_checkpointing:
            # The stage threads stopped at the end of the data, so every operator is where the
            # last batch left it; only the sources moved (to the new epoch). A checkpoint taken
            # now must resume in the new epoch, not at the old one's end.
            self._executor.last_state = self._snapshot()
        self._executor.resume()

    def close(self) -> None:
        """Stop the executor's threads. The pipeline cannot run afterwards."""
        if self._executor is not None:
            self._executor.close()
        for node in self._ops:  # worker pools, read processes, files, decode processes
            node.op.close()

    def __del__(self):
        # In a forked child (a DataLoader worker) the pipeline's threads, helper processes and
        # native objects are the parent's: closing them there could wait forever on threads
        # the fork did not copy.
        if getattr(self, "_pid", os.getpid()) != os.getpid():
            return
        try:
            self.close()
        except Exception:
            pass

    # --- reader metadata -------------------------------------------------------------------
    def reader_meta(self, name: str | None = None) -> dict:
        """Reader metadata (DALI's ``epoch_size``, ``epoch_size_padded``, ``number_of_shards``,
        ``shard_id``, ``pad_last_batch``, ``stick_to_shard``); every reader's when no name."""
        self.build()
        if name is None:
            return {n: r.reader_meta() for n, r in self._readers.items()}
        return self._reader(name).reader_meta()

    def epoch_size(self, name: str | None = None):
        """``epoch_size_padded`` of reader ``name`` (the whole dataset, not the shard)."""
        meta = self.reader_meta(name)
        if name is None:
            return {n: m["epoch_size_padded"] for n, m in meta.items()}
        return meta["epoch_size_padded"]

    def _reader(self, name: str):
        if name not in self._readers:
            raise ArgumentError(
                f"no reader named {name!r} in this pipeline (readers: {sorted(self._readers)})"
            )
        return self._readers[name]


# --- pipeline_def ---------------------------------------------------------------------------------

_PIPELINE_ARGS = set(inspect.signature(Pipeline.__init__).parameters) - {"self"}


def pipeline_def(
    fn: Callable | None = None, *, enable_conditionals: bool = False, **pipeline_kwargs
):
    """Turn a graph-defining function into a function that returns a :class:`Pipeline`.

    Keyword arguments at call time go to the function when it has a parameter of that name
    (a "shadows" warning if it is also a Pipeline argument), otherwise to the Pipeline; call-time
    Pipeline arguments override the decorator's. The function's return value (a node, a tuple
    of nodes or None) becomes the pipeline outputs.

    With ``enable_conditionals=True`` the function's ``if``/``elif``/``else``, ``and``, ``or``
    and ``not`` also work on DataNodes holding one scalar per sample: each sample takes its own
    branch (``_conditionals.py``; the function's source is rewritten once, here).

    Example:
        >>> @pipeline_def(enable_conditionals=True, batch_size=8, num_threads=2, device_id=0)
        ... def pipe():
        ...     jpegs, labels = fn.readers.file(file_root=root)
        ...     images = fn.decoders.image(jpegs)
        ...     if fn.random.coin_flip():
        ...         images = fn.flip(images)
        ...     return images, labels
    """

    pipeline_kwargs.pop("debug", None)  # DALI's debug mode: the graph runs as usual here

    def decorator(func: Callable) -> Callable[..., Pipeline]:
        params = inspect.signature(func).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise TypeError(f"@pipeline_def function {func.__name__!r} must not take **kwargs")
        graph_fn = func
        if enable_conditionals:
            from ._conditionals import convert

            graph_fn = convert(func)

        @functools.wraps(func)
        def create_pipeline(*args, **kwargs) -> Pipeline:
            fn_kwargs, pipe_kwargs = {}, {}
            for k, v in kwargs.items():
                if k in params:
                    if k in _PIPELINE_ARGS:
                        warnings.warn(
                            f"the argument {k!r} of {func.__name__!r} shadows a Pipeline "
                            "argument of the same name; it goes to the function",
                            stacklevel=2,
                        )
                    fn_kwargs[k] = v
                elif k in ("enable_conditionals", "debug"):
                    continue
                else:
                    pipe_kwargs[k] = v
            pipe = Pipeline(**{**pipeline_kwargs, **pipe_kwargs})
            pipe._scope = None  # the current `if` branch while tracing (_conditionals.py)
            with pipe:
                outs = graph_fn(*args, **fn_kwargs)
            if outs is None:
                outs = ()
            elif isinstance(outs, DataNode):
                outs = (outs,)
            pipe.set_outputs(*outs)
            return pipe

        return create_pipeline

    return decorator(fn) if fn is not None else decorator


def _make_experimental():
    """``dlpipe.pipeline.experimental``: DALI's ``nvidia.dali.pipeline.experimental`` path,
    whose ``pipeline_def`` is the same decorator (its ``debug=`` argument is accepted)."""
    import sys
    import types

    mod = types.ModuleType(
        __name__ + ".experimental", "DALI's nvidia.dali.pipeline.experimental (pipeline_def)."
    )
    mod.pipeline_def = pipeline_def
    sys.modules[mod.__name__] = mod
    return mod


experimental = _make_experimental()
