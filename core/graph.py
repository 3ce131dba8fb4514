"""Graph capture: DataNodes, the operator base class, the registry and device placement.

An operator call inside ``with pipe:`` (``fn.resize(images, size=224)``) builds an
:class:`Operator` (its arguments are checked right there), wraps it in an :class:`OpNode` that
records its inputs, and returns one :class:`DataNode` per output. Nothing runs until the
pipeline's executor does.

Execution contract for an operator implementation (see ``executor.py``):

* ``batch_params(n)`` runs once per iteration, sequentially, on the stage thread. Anything
  random is drawn here from ``self.rng`` so results do not depend on the thread count. It
  returns a list of ``n`` per-sample parameters (or ``None``).
* ``run_sample(inputs, args, param)`` runs per sample on the CPU thread pool. ``inputs`` is a
  tuple of numpy arrays, ``args`` a dict of per-sample argument-input values (numpy scalars or
  arrays) and ``param`` the sample's entry of ``batch_params``. It returns one array per output
  (a single array or a tuple).
* GPU operators implement ``run_batch(inputs, args, params, stream)`` instead, where every input
  is a list of CuPy arrays (the whole batch), and run one launch per batch.
* A sample an operator drops (``on_error="skip"``) is replaced by the executor with another
  sample of the batch, every output of it: ``run_sample`` raises ``errors.SampleSkipped``;
  ``run_batch`` returns ``Skipped(outputs, {sample index: message})``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ._argcheck import check_operator_args
from .errors import ArgumentError, PipelineError

if TYPE_CHECKING:
    from .options import RuntimeOptions


class Skipped:
    """What ``run_batch`` returns when it dropped samples (``on_error="skip"``): its outputs, in
    which the dropped samples hold anything, and ``samples`` = {sample index: error message}."""

    def __init__(self, outputs: Any, samples: dict[int, str]):
        self.outputs = outputs
        self.samples = samples


@dataclass(frozen=True)
class BuildContext:
    """What :meth:`Operator.prepare` learns about the pipeline being built.

    Attributes:
        device_id: the pipeline's GPU (None: the current device, or no GPU use).
        batch_size: the pipeline's maximum batch size.
        num_threads: the pipeline's CPU worker threads.
        runtime: the pipeline's runtime options (``dlpipe.options``).
    """

    device_id: int | None
    batch_size: int
    num_threads: int
    runtime: RuntimeOptions


@dataclass(frozen=True)
class LaneContext:
    """What :meth:`Operator.prepare_gpu` learns from the GPU stage, for a mixed operator.

    Attributes:
        device_id: the GPU.
        lanes: how many iterations' mixed operators run at once (each in its own thread with its
            own CUDA stream); ``run_batch`` of an operator that sets ``concurrent_batches`` may
            be called from that many threads at once.
        cpu_threads: the CPU threads this operator may use per call (the pipeline's threads
            shared among the lanes).
        reuse_outputs: no output of this operator is a pipeline output, so a decoder may decode
            into memory of its earlier batches once nothing refers to them.
    """

    device_id: int
    lanes: int
    cpu_threads: int
    reuse_outputs: bool


class DataNode:
    """A symbolic batch: one output of one operator in a pipeline graph."""

    def __init__(self, name: str, device: str, source: OpNode | None):
        self.name = name
        self.device = device
        self.source = source

    def gpu(self) -> DataNode:
        """Copy this CPU node to the GPU (through pinned memory)."""
        if self.device == "gpu":
            return self
        from . import operators  # noqa: F401  (registers "_copy_to_gpu")

        return _call_operator("_copy_to_gpu", (self,), {"device": "mixed"})[0]

    def cpu(self) -> DataNode:
        """GPU -> CPU inside the graph is not supported (as in DALI's classic executor): take
        the GPU output and call ``TensorListGPU.as_cpu()`` on it instead."""
        if self.device == "cpu":
            return self
        raise PipelineError(
            f"DataNode {self.name!r}: GPU -> CPU transfer inside the graph is not supported; "
            "use TensorListGPU.as_cpu() on the pipeline output instead"
        )

    def __repr__(self) -> str:
        return f"DataNode(name={self.name!r}, device={self.device!r})"


class Operator:
    """Base class of every operator implementation.

    Subclasses set the class attributes below and check their arguments in ``__init__`` (build
    time), raising :class:`ArgumentError` that names the argument and its value.

    Attributes:
        schema: the fn name, dotted for submodules (``"resize"``, ``"readers.file"``).
        devices: devices the operator supports.
        num_inputs: (min, max) positional inputs.
        num_outputs: how many outputs one call returns.
        arg_inputs: keyword arguments that may be given a (CPU) DataNode, per sample.
        cpu_inputs: indices of positional inputs that stay CPU nodes when the operator runs on
            the GPU (DALI's ``InputDevice::CPU``: the anchor and shape of ``fn.slice``); its
            ``run_batch`` gets them as lists of numpy arrays.
        is_random: True if the operator draws from ``self.rng`` (gets a seed from the pipeline).
        is_reader: True for readers (have ``reader_meta`` and a ``name``).
        batch_level: True when ``run_sample`` is not used: ``run_batch_cpu`` gets whole batches.
        provides_batch: True for sources whose ``batch_params`` returns the iteration's batch
            (its length sets the batch size; StopIteration ends the epoch).
        light: ``run_sample`` is a few microseconds of Python around I/O or a lookup (reading a
            file, returning a drawn number). A run of light operators only is not spread over
            the thread pool: it runs on the stage thread (see ``executor.py``).
        dense_inputs: (GPU-stage operators) its CPU inputs are best given as one batch array:
            the CPU workers pack each sample into it as it finishes, and ``run_batch`` finds it
            as ``inputs[k].array`` when every sample fitted (``executor.Rows``).
        concurrent_batches: (mixed operators) ``run_batch`` may run in several lanes at once,
            each on its own stream. The GPU stage runs any other mixed operator in the lanes
            too, one call at a time (``executor_gpu.py``).
    """

    schema: str = ""
    devices: tuple[str, ...] = ("cpu",)
    num_inputs: tuple[int, int] = (1, 1)
    num_outputs: int = 1
    arg_inputs: frozenset[str] = frozenset()
    cpu_inputs: tuple[int, ...] = ()
    is_random: bool = False
    is_reader: bool = False
    batch_level: bool = False
    provides_batch: bool = False
    light: bool = False
    dense_inputs: bool = False
    concurrent_batches: bool = False
    positional_args: tuple[str, ...] = ()  # arguments that may be given positionally (source)
    ops_name: str = ""  # the ``ops`` class name when it is not the CamelCase schema (TFRecord)

    def __init__(
        self, device: str = "cpu", seed: int | None = None, name: str | None = None, **kwargs: Any
    ):
        if device not in self.devices:
            raise ArgumentError(
                f"{self.schema}: device={device!r} is not supported; use one of {self.devices}"
            )
        unknown = set(kwargs) - self.accepted_args()
        if unknown:
            raise ArgumentError(f"{self.schema}: unknown argument(s) {sorted(unknown)}")
        self.device = device
        self.seed = seed
        self.name = name
        self.rng: np.random.Generator | None = None
        # Per-operator defaults filled in by subclasses from kwargs.
        self.setup(**kwargs)

    # --- subclass API -------------------------------------------------------------------
    @classmethod
    def accepted_args(cls) -> set[str]:
        """Names of keyword arguments ``setup`` takes."""
        import inspect

        params = inspect.signature(cls.setup).parameters
        return {n for n, p in params.items() if n != "self" and p.kind is p.KEYWORD_ONLY}

    def setup(self, **kwargs: Any) -> None:
        """Check and store the arguments (keyword-only parameters of the override)."""

    def output_devices(self) -> list[str]:
        dev = "gpu" if self.device in ("mixed", "gpu") else "cpu"
        return [dev] * self.num_outputs

    def output_layouts(self, input_layouts: Sequence[str]) -> list[str]:
        """Layout string of each output, given the input layouts ("" when unknown)."""
        return [input_layouts[0] if input_layouts else ""] * self.num_outputs

    def bind_inputs(self, inputs: Sequence[DataNode], arg_nodes: dict[str, DataNode]) -> None:
        """A hook called once the call's inputs are known, before its outputs are made: an
        operator whose outputs depend on them sets ``num_outputs`` here (``random_bbox_crop``
        has a labels output when it has a labels input)."""

    def after_call(self, outputs: list[DataNode]) -> list[DataNode]:
        """The nodes a call returns (a hook: ``external_source(device="gpu")`` adds a copy)."""
        return outputs

    def bind_rng(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def prepare(self, ctx: BuildContext) -> None:
        """Called once by ``Pipeline.build``, before anything runs: take what depends on the
        pipeline rather than on the operator's arguments (its runtime options, its GPU)."""

    def prepare_gpu(self, ctx: LaneContext) -> None:
        """Called once by the GPU stage for a mixed operator, after :meth:`prepare`."""

    def state_dict(self) -> dict | None:
        """What a checkpoint needs to continue this operator's stream exactly: the RNG state
        and, for readers, the loader's position. Plain data (JSON-serialisable)."""
        state = {}
        if self.rng is not None:
            state["rng"] = self.rng.bit_generator.state
        loader = getattr(self, "loader", None)
        if loader is not None:
            state["loader"] = loader.state_dict()
        return state or None

    def load_state_dict(self, state: dict) -> None:
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]
        if "loader" in state:
            self.loader.load_state_dict(state["loader"])

    def batch_params(self, n: int) -> list | None:
        return None

    def prefetch(self, params: list) -> None:
        """Start the work of a coming ``run_batch_cpu(inputs, args, params)`` now (a reader
        reads its files ahead). The executor calls it with each iteration's ``params`` as
        soon as they are drawn, in order, one iteration early, from the stage thread; the
        ``run_batch_cpu`` call with the same ``params`` object follows."""

    def batch_level_in(self, node: OpNode) -> bool:
        """Whether this instance runs batch-wise (``run_batch_cpu``), given its node's inputs
        and argument inputs; ``batch_level`` unless an operator decides per node."""
        return self.batch_level

    def close(self) -> None:
        """Release what the operator holds outside Python (processes, files); called by
        ``Pipeline.close``. It may run again afterwards and then takes them anew."""

    def run_sample(self, inputs: tuple, args: dict, param: Any):
        raise NotImplementedError(f"{self.schema} has no CPU implementation")

    def run_batch(self, inputs: list, args: dict, params: list | None, stream: Any):
        raise NotImplementedError(f"{self.schema} has no GPU implementation")


class OpNode:
    """One operator instance in a graph, with its inputs and outputs."""

    def __init__(
        self, op: Operator, inputs: Sequence[DataNode], arg_nodes: dict[str, DataNode], name: str
    ):
        self.op = op
        self.inputs = list(inputs)
        self.arg_nodes = dict(arg_nodes)
        self.name = name
        self.outputs: list[DataNode] = []

    @property
    def device(self) -> str:
        return self.op.device

    def __repr__(self) -> str:
        return f"OpNode({self.op.schema!r}, name={self.name!r}, device={self.device!r})"


# --- registry ---------------------------------------------------------------------------------

REGISTRY: dict[str, type[Operator]] = {}
LEGACY_NAMES: dict[str, str] = {}  # ops.FileReader -> "readers.file"


def register(cls: type[Operator] | None = None, *, legacy: Sequence[str] = ()):
    """Class decorator: make an operator reachable as ``fn.<schema>`` and ``ops.<Name>``."""

    def wrap(c: type[Operator]) -> type[Operator]:
        if not c.schema:
            raise TypeError(f"{c.__name__} has no schema name")
        REGISTRY[c.schema] = c
        for alias in legacy:
            LEGACY_NAMES[alias] = c.schema
        return c

    return wrap(cls) if cls is not None else wrap


# --- graph building -----------------------------------------------------------------------------

_local = threading.local()


def current_pipeline():
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def push_pipeline(pipe) -> None:
    if not hasattr(_local, "stack"):
        _local.stack = []
    _local.stack.append(pipe)


def pop_pipeline():
    return _local.stack.pop()


def _call_operator(schema: str, inputs: Sequence, kwargs: dict) -> list[DataNode]:
    """Build an operator and add one instance of it to the current pipeline."""
    pipe = current_pipeline()
    if pipe is None:
        raise PipelineError(
            f"fn.{schema} called outside a pipeline: call it inside `with pipe:` or a "
            "@pipeline_def function"
        )
    cls = REGISTRY[schema]
    static = {k: v for k, v in kwargs.items() if not isinstance(v, DataNode)}
    arg_nodes = {k: v for k, v in kwargs.items() if isinstance(v, DataNode)}
    for k, node in arg_nodes.items():
        if k not in cls.arg_inputs:
            raise ArgumentError(f"{schema}: argument {k!r} does not accept a DataNode")
        if node.device != "cpu":
            raise ArgumentError(
                f"{schema}: argument input {k!r} must be a CPU node, got {node.device!r}"
            )
    for i, x in enumerate(inputs):
        if not isinstance(x, DataNode):
            raise ArgumentError(f"{schema}: input {i} must be a DataNode, got {type(x).__name__}")
    lo, hi = cls.num_inputs
    if not lo <= len(inputs) <= hi:
        raise ArgumentError(f"{schema}: takes {lo}..{hi} inputs, got {len(inputs)}")
    check_operator_args(cls, schema, static)  # a str where a number goes: named here
    if "device" not in static:
        # DALI: "gpu" when any positional input is on the GPU, else "cpu".
        static["device"] = "gpu" if any(x.device == "gpu" for x in inputs) else "cpu"
    op = cls(**static)
    op.bind_inputs(inputs, arg_nodes)
    _check_placement(op, inputs)
    name = op.name or f"__{cls.__name__}_{pipe._next_op_id()}"
    node = OpNode(op, inputs, arg_nodes, name)
    node.outputs = [
        DataNode(f"{name}[{i}]", dev, node) for i, dev in enumerate(op.output_devices())
    ]
    pipe._add_op(node)
    return op.after_call(node.outputs)


def _check_placement(op: Operator, inputs: Sequence[DataNode]) -> None:
    for x in inputs:
        if op.device == "cpu" and x.device == "gpu":
            raise PipelineError(
                f"{op.schema}: a CPU operator cannot take the GPU node {x.name!r}; "
                "put this operator on the GPU (device='gpu') or move it before the transfer"
            )
        if op.device == "mixed" and x.device != "cpu":
            raise PipelineError(f"{op.schema}: a mixed operator takes CPU inputs, got {x.name!r}")


def make_fn(schema: str) -> Callable[..., Any]:
    """The ``fn.<schema>`` function: builds one operator instance, returns its output node(s)."""
    cls = REGISTRY[schema]

    def fn(*inputs, **kwargs):
        inputs, kwargs = _positional_to_kwargs(cls, inputs, kwargs)
        outs = _call_operator(schema, inputs, kwargs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    fn.__module__ = "dlpipe.fn"
    fn.__name__ = schema.rsplit(".", 1)[-1]
    fn.__qualname__ = fn.__name__
    fn.__doc__ = cls.__doc__
    return fn


def _positional_to_kwargs(cls: type[Operator], inputs: tuple, kwargs: dict) -> tuple:
    """``fn.external_source(gen)``: leading non-DataNode positionals name ``positional_args``."""
    if not cls.positional_args or not inputs or isinstance(inputs[0], DataNode):
        return inputs, kwargs
    names = cls.positional_args[: len(inputs)]
    for name, value in zip(names, inputs, strict=False):
        if name in kwargs:
            raise ArgumentError(f"{cls.schema}: {name!r} given both positionally and by keyword")
        kwargs = {**kwargs, name: value}
    return inputs[len(names) :], kwargs


def make_ops_class(schema: str) -> type:
    """The legacy ``ops.<Name>`` class: arguments at construction, inputs at call time.

    Every call of the same object adds a new operator instance with the same arguments.
    """
    cls = REGISTRY[schema]

    class LegacyOp:
        __doc__ = cls.__doc__

        def __init__(self, **kwargs):
            unknown = set(kwargs) - cls.accepted_args() - {"device", "seed", "name"}
            unknown -= cls.arg_inputs
            if unknown:
                raise ArgumentError(f"{schema}: unknown argument(s) {sorted(unknown)}")
            self._kwargs = kwargs

        def __call__(self, *inputs, **arg_inputs):
            outs = _call_operator(schema, inputs, {**self._kwargs, **arg_inputs})
            return outs[0] if len(outs) == 1 else tuple(outs)

    LegacyOp.__name__ = LegacyOp.__qualname__ = cls.ops_name or schema_to_class_name(schema)
    LegacyOp.__module__ = "dlpipe.ops"
    return LegacyOp


def schema_to_class_name(schema: str) -> str:
    last = schema.rsplit(".", 1)[-1]
    return "".join(p[:1].upper() + p[1:] for p in last.split("_"))


def attach(module, schema: str, obj: Any, name: str | None = None) -> None:
    """Set ``obj`` at ``schema``'s dotted path under ``module``, making submodules as needed
    (``readers.file`` -> ``module.readers.file``)."""
    import sys
    import types

    *path, last = schema.split(".")
    target = module
    for part in path:
        sub = getattr(target, part, None)
        if sub is None:
            sub = types.ModuleType(f"{target.__name__}.{part}")
            setattr(target, part, sub)
            sys.modules[sub.__name__] = sub
        target = sub
    setattr(target, name or last, obj)
