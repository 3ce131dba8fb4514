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


class Rows(list):
    """The samples of one CPU batch (or the per-sample parameters of one operator) that are
    also the rows of one array, ``array``: what code that takes whole batches uses instead of
    the list (``Operator.dense_inputs``, e.g. the ``.gpu()`` copy; a random crop's draws).
    Anything that reorders or subsets the list (a skipped sample's replacement, a conditional
    branch) makes a plain list again, so ``array`` is always the list's own rows."""

    def __init__(self, samples, array: np.ndarray):
        super().__init__(samples)
        self.array = array


class Repeated(Rows):
    """Rows that are all one sample (a constant's batch): any selection of its samples is
    its first rows (``_conditionals.compact``), no fancy index needed."""


class Batch:
    """The samples of a batch-level operator's output as the rows of one array, with no list
    of them: what the CPU stage keeps of an output that only operators reading whole arrays
    take (``Operator.reads_batch_arrays``; ``Executor._array_only``); they get its rows as
    a plain array (``_conditionals.compact``), or the Batch itself outside conditionals. It
    reads as a sequence of its rows (``len``, ``x[i]``, iteration: the per-sample fallbacks
    of ``operators/_small.py``); ``array`` as in :class:`Rows`. ``repeated``: every row is
    the same sample (a constant's batch), so any selection is the first rows. Building the
    per-sample list and taking it apart again cost ~10-20 us per operator and batch
    (BENCHMARKS.md, "The CPU stage without per-sample lists")."""

    __slots__ = ("array", "repeated")

    def __init__(self, array: np.ndarray, repeated: bool = False):
        self.array = array
        self.repeated = repeated

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i):
        return self.array[i]

    def __iter__(self):
        return iter(self.array)

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)

    def take(self, indices) -> list:
        """The samples ``indices`` as a list (a skipped sample's replacement)."""
        return [self.array[j, ...] for j in indices]


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
    """A symbolic batch: one output of one operator in a pipeline graph.

    Besides feeding operators, DataNodes form expressions, as in DALI: arithmetic
    (``+ - * / // % **``, unary ``-``/``+``), comparisons (``== != < <= > >=``, giving bool),
    bitwise ``& | ^``, with DataNodes, Python scalars or ``types.Constant`` on either side;
    subscripts (``x[0]``, ``x[1:3]``, ``x[:, ::2]``, ``x[..., dlpipe.newaxis]``); and
    ``x.shape()``. One expression tree becomes one operator (``operators/arithmetic.py``).

    Example:
        >>> with pipe:
        ...     images, labels = fn.readers.file(file_root=root)
        ...     scaled = fn.cast(fn.decoders.image(images), dtype=types.FLOAT) / 255 - 0.5
        ...     pipe.set_outputs(scaled, labels[0])
    """

    # numpy defers to the DataNode's reflected operators (``np.float32(2) * node``,
    # ``np.array([1, 2]) * node``) instead of broadcasting over it as an object.
    __array_ufunc__ = None
    # The comparison operators build graph nodes, so DataNodes hash by identity.
    __hash__ = object.__hash__

    def __init__(self, name: str, device: str, source: OpNode | None):
        self.name = name
        self.device = device
        self.source = source

    def gpu(self) -> DataNode:
        """Copy this CPU node to the GPU (through pinned memory)."""
        if self.device == "gpu":
            return self
        # "_copy_to_gpu" is registered: importing any dlpipe module runs dlpipe/__init__, whose
        # fn/ops load every operator (_registry.load_all)
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

    # --- expressions (operators/arithmetic.py) ------------------------------------------
    def _op(self, name: str, *inputs) -> DataNode:
        from .operators.arithmetic import arithm_op

        return arithm_op(name, *inputs)

    def __add__(self, other):
        return self._op("add", self, other)

    def __radd__(self, other):
        return self._op("add", other, self)

    def __sub__(self, other):
        return self._op("sub", self, other)

    def __rsub__(self, other):
        return self._op("sub", other, self)

    def __mul__(self, other):
        return self._op("mul", self, other)

    def __rmul__(self, other):
        return self._op("mul", other, self)

    def __pow__(self, other):
        return self._op("pow", self, other)

    def __rpow__(self, other):
        return self._op("pow", other, self)

    def __truediv__(self, other):
        return self._op("fdiv", self, other)

    def __rtruediv__(self, other):
        return self._op("fdiv", other, self)

    def __floordiv__(self, other):
        return self._op("div", self, other)

    def __rfloordiv__(self, other):
        return self._op("div", other, self)

    def __mod__(self, other):
        return self._op("mod", self, other)

    def __rmod__(self, other):
        return self._op("mod", other, self)

    def __neg__(self):
        return self._op("minus", self)

    def __pos__(self):
        return self  # DALI: unary + is a no-op, no operator is added

    def __eq__(self, other):
        return self._op("eq", self, other)

    def __ne__(self, other):
        return self._op("neq", self, other)

    def __lt__(self, other):
        return self._op("lt", self, other)

    def __le__(self, other):
        return self._op("leq", self, other)

    def __gt__(self, other):
        return self._op("gt", self, other)

    def __ge__(self, other):
        return self._op("geq", self, other)

    def __and__(self, other):
        return self._op("bitand", self, other)

    def __rand__(self, other):
        return self._op("bitand", other, self)

    def __or__(self, other):
        return self._op("bitor", self, other)

    def __ror__(self, other):
        return self._op("bitor", other, self)

    def __xor__(self, other):
        return self._op("bitxor", self, other)

    def __rxor__(self, other):
        return self._op("bitxor", other, self)

    def __bool__(self):
        raise TypeError(
            '"DataNode" was used in conditional context - it might have been used in truth'
            " evaluation for `if` statement, logical expression or cast to a boolean."
            " To use conditional execution via `if` statements you need to specify"
            " `enable_conditionals=True` in `@dlpipe.pipeline_def` decorator."
            " You can read more about conditional execution in docs/graph-language.md."
            " Bool conversion can be achieved with the `cast` operator."
        )

    def __iter__(self):
        raise TypeError(
            f"DataNode {self.name!r} is not iterable: it stands for a whole batch. An operator "
            "with several outputs returns a tuple of DataNodes; to take elements of each "
            "sample, index the node (x[0], x[1:3])"
        )

    def __getitem__(self, index) -> DataNode:
        from .operators.subscript import subscript

        return subscript(self, index)

    def shape(self, *, dtype=None, device: str = "cpu") -> DataNode:
        """The per-sample shapes of this node, as a new node (``fn.shapes``): a 1-D INT64
        tensor per sample (or ``dtype``), on ``device``."""
        if device == "cpu" and self.device == "gpu":
            self.cpu()  # raises: no GPU -> CPU in the graph
        kwargs = {"device": device} if dtype is None else {"device": device, "dtype": dtype}
        return _call_operator("shapes", (self,), kwargs)[0]

    def property(self, key: str, *, device: str = "cpu") -> DataNode:
        """A metadata property of each sample (``fn.get_property``): ``"source_info"`` (where
        the sample came from) or ``"layout"``, as a 1-D uint8 tensor per sample."""
        if device == "cpu" and self.device == "gpu":
            self.cpu()
        return _call_operator("get_property", (self,), {"key": key, "device": device})[0]

    def source_info(self, *, device: str = "cpu") -> DataNode:
        """``self.property("source_info")``."""
        return self.property("source_info", device=device)


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
        process_safe: ``run_sample`` is a pure function of its inputs, arguments and
            parameter, and the operator pickles with what it needs: a run of such operators
            may go to the sample processes (``_sample_processes.py``).
        holds_gil: ``run_sample`` is mostly Python and numpy calls on small arrays, holding
            the GIL between them, so threads barely run it side by side: a run sent to the
            sample processes must have one such operator (else the copies cost more than
            they save).
        dense_inputs: (GPU-stage operators) its CPU inputs are best given as one batch array:
            the CPU workers pack each sample into it as it finishes, and ``run_batch`` finds it
            as ``inputs[k].array`` when every sample fitted (``graph.Rows``).
        reads_batch_arrays: (batch-level CPU operators) ``run_batch_cpu`` reads its inputs and
            argument inputs only through ``len``, ``x[i]`` and ``operators/_small.stack``: a
            :class:`Batch` or a plain array (its rows) does, so an output that only such
            operators take is kept as one array, with no per-sample list
            (``Executor._array_only``).
        same_each_batch: (batch-level CPU operators without inputs) ``run_batch_cpu`` gives the
            same values in every iteration of one batch size (a constant): an output that only
            operators reading whole arrays take is made once per batch size, read-only, and
            shared by the iterations (``Executor._run_batch_level``).
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
    process_safe: bool = False
    holds_gil: bool = False
    dense_inputs: bool = False
    reads_batch_arrays: bool = False
    same_each_batch: bool = False
    concurrent_batches: bool = False
    positional_args: tuple[str, ...] = ()  # arguments that may be given positionally (source)
    ops_name: str = ""  # the ``ops`` class name when it is not the CamelCase schema (TFRecord)

    def __init__(
        self,
        device: str = "cpu",
        seed: int | None = None,
        name: str | None = None,
        bytes_per_sample_hint: int | Sequence[int] | None = None,
        preserve: bool = False,
        **kwargs: Any,
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
        # Accepted on every operator, as in DALI: a memory hint (dlpipe sizes outputs itself)
        # and "keep this operator even if nothing uses its outputs".
        self.bytes_per_sample_hint = bytes_per_sample_hint
        self.preserve = bool(preserve)
        self.rng: np.random.Generator | None = None
        # another instance whose draws this one repeats (the input sets of one call)
        self.seed_source: Operator | None = None
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

    def checkpointing_enabled(self) -> None:
        """Called by ``Pipeline.build`` when the pipeline keeps checkpoints, before any state
        is restored (list readers then shuffle the original order every epoch, as DALI)."""

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

    def small_output_in(self, node: OpNode) -> bool:
        """Whether every sample of this node's outputs is known at build time to be a small
        host array (at most :data:`SMALL_ELEMENTS` elements): a constant, a random number,
        arithmetic and subscripts over those. Operators over small inputs then run batch-wise
        (one numpy call per batch instead of a Python call per sample: the bookkeeping of
        automatic augmentation is hundreds of such nodes). False unless an operator knows."""
        return False

    def close(self) -> None:
        """Release what the operator holds outside Python (processes, files); called by
        ``Pipeline.close``. It may run again afterwards and then takes them anew."""

    def run_sample(self, inputs: tuple, args: dict, param: Any):
        raise NotImplementedError(f"{self.schema} has no CPU implementation")

    def run_batch(self, inputs: list, args: dict, params: list | None, stream: Any):
        raise NotImplementedError(f"{self.schema} has no GPU implementation")


SMALL_ELEMENTS = 1024  # Operator.small_output_in: elements per sample


def small_host_inputs(node: OpNode) -> bool:
    """Whether every input and argument input of ``node`` is a small host array
    (``Operator.small_output_in`` of its producer, on the CPU); False for a node without any.
    Memoised on the node (the graph does not change once built)."""
    known = node.__dict__.get("_small_inputs")
    if known is None:
        nodes = [*node.inputs, *node.arg_nodes.values()]
        known = bool(nodes) and all(
            x.device == "cpu" and x.source is not None and x.source.op.small_output_in(x.source)
            for x in nodes
        )
        node._small_inputs = known
    return known


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
        # The branch of an `if` on a DataNode this node runs in (_conditionals.Scope), or
        # None: every sample. Set by _call_operator.
        self.scope = None

    @property
    def device(self) -> str:
        return self.op.device

    def __repr__(self) -> str:
        return f"OpNode({self.op.schema!r}, name={self.name!r}, device={self.device!r})"


# --- registry ---------------------------------------------------------------------------------

# Arguments every operator takes (Operator.__init__), besides its own.
COMMON_ARGS = frozenset({"device", "seed", "name", "bytes_per_sample_hint", "preserve"})
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
    # DALI: "None is not a valid value for any argument type, so treat it as if the argument
    # was not supplied at all" (NeMo passes min_duration=None, for one)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
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
    node.scope = _node_scope(pipe, op, [*inputs, *arg_nodes.values()])
    node.outputs = [
        DataNode(f"{name}[{i}]", dev, node) for i, dev in enumerate(op.output_devices())
    ]
    pipe._add_op(node)
    return op.after_call(node.outputs)


def _node_scope(pipe, op: Operator, inputs: Sequence[DataNode]):
    """The conditional scope of a new node (``_conditionals.py``): the current ``if`` branch,
    or the whole batch for an operator without DataNode inputs (as in DALI).

    Raises:
        PipelineError: an input made inside a branch, used outside it.
    """
    scope = getattr(pipe, "_scope", None)
    for x in inputs:
        src_scope = x.source.scope if x.source is not None else None
        if src_scope is None or getattr(op, "reads_child_scopes", False):
            continue
        if scope is None or not scope.within(src_scope):
            raise PipelineError(
                f"{op.schema}: the input {x.name!r} was produced inside a branch of an `if` on "
                "a DataNode and is used outside that branch; assign it to a variable in both "
                "branches so that it is merged after the `if`"
            )
    return scope if inputs else None


def _check_placement(op: Operator, inputs: Sequence[DataNode]) -> None:
    for x in inputs:
        if op.device == "cpu" and x.device == "gpu":
            raise PipelineError(
                f"{op.schema}: a CPU operator cannot take the GPU node {x.name!r}; "
                "put this operator on the GPU (device='gpu') or move it before the transfer"
            )
        if op.device == "mixed" and x.device != "cpu":
            raise PipelineError(f"{op.schema}: a mixed operator takes CPU inputs, got {x.name!r}")


def call_with_input_sets(schema: str, inputs: Sequence, kwargs: dict):
    """One operator call, as ``fn.<schema>`` returns it: a node, or a tuple of nodes.

    DALI's *input sets*: positional inputs given as lists (``fn.slice([image, mask], ...)``)
    apply the operator to each set with the same arguments and the same random draws, so an
    image and its mask get the same window. Each set is an operator instance of its own, the
    later ones drawing from a copy of the first's generator (``Operator.seed_source``).
    Returns a list with one entry per set; for an operator of several outputs, a tuple with a
    list per output (``a, b = fn.op([x, y])`` for one output; ``outs[k][i]``: output ``k`` of
    set ``i``)."""
    sets = [
        i
        for i, x in enumerate(inputs)
        if isinstance(x, list | tuple) and x and all(isinstance(v, DataNode) for v in x)
    ]
    inputs = [x if i in sets else _as_node(x, schema, i) for i, x in enumerate(inputs)]
    if not sets:
        outs = _call_operator(schema, inputs, kwargs)
        return outs[0] if len(outs) == 1 else tuple(outs)
    lengths = sorted({len(inputs[i]) for i in sets})
    if len(lengths) > 1 or lengths[0] == 0:
        raise ArgumentError(
            f"{schema}: input sets must be non-empty lists of one length, got lengths {lengths}"
        )
    per_set, first = [], None
    for k in range(lengths[0]):
        one = [x[k] if i in sets else x for i, x in enumerate(inputs)]
        outs = _call_operator(schema, one, kwargs)
        op = outs[0].source.op if outs and outs[0].source is not None else None
        if first is None:
            first = op
        elif op is not None:
            op.seed_source = first
        per_set.append(outs)
    if len(per_set[0]) == 1:
        return [outs[0] for outs in per_set]
    return tuple([outs[j] for outs in per_set] for j in range(len(per_set[0])))


def _as_node(x, schema: str, i: int):
    """A positional input as a node: DALI turns plain values (``fn.slice(x, 1, 3, axes=[0])``,
    numpy arrays) into constant nodes, as ``types.Constant`` does."""
    if isinstance(x, DataNode) or current_pipeline() is None:
        return x  # (outside a pipeline, _call_operator says what is wrong)
    if isinstance(x, bool | int | float | np.number | np.ndarray) or (
        isinstance(x, list | tuple)
        and all(isinstance(v, bool | int | float | np.number) for v in x)
    ):
        from .types import Constant

        node = Constant(x)
        return node if isinstance(node, DataNode) else Constant(x, device="cpu")
    return x  # _call_operator names the input and its type


def make_fn(schema: str) -> Callable[..., Any]:
    """The ``fn.<schema>`` function: builds one operator instance, returns its output node(s)."""
    cls = REGISTRY[schema]

    def fn(*inputs, **kwargs):
        inputs, kwargs = _positional_to_kwargs(cls, inputs, kwargs)
        return call_with_input_sets(schema, inputs, kwargs)

    fn.__module__ = "dlpipe.fn"
    fn.__name__ = schema.rsplit(".", 1)[-1]
    fn.__qualname__ = fn.__name__
    fn.__doc__ = cls.__doc__
    return fn


def make_alias_fn(alias: str, schema: str) -> Callable[..., Any]:
    """A deprecated ``fn`` name (``fn.image_decoder``): warns, then calls ``fn.<schema>``."""
    import warnings

    target = make_fn(schema)

    def fn(*inputs, **kwargs):
        warnings.warn(
            f"fn.{alias} is deprecated: use fn.{schema} instead",
            DeprecationWarning,
            stacklevel=2,
        )
        return target(*inputs, **kwargs)

    fn.__module__ = "dlpipe.fn"
    fn.__name__ = fn.__qualname__ = alias
    fn.__doc__ = f"Deprecated alias of ``fn.{schema}``.\n\n{target.__doc__ or ''}"
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
            unknown = set(kwargs) - cls.accepted_args() - COMMON_ARGS
            unknown -= cls.arg_inputs
            if unknown:
                raise ArgumentError(f"{schema}: unknown argument(s) {sorted(unknown)}")
            self._kwargs = kwargs

        def __call__(self, *inputs, **arg_inputs):
            return call_with_input_sets(schema, inputs, {**self._kwargs, **arg_inputs})

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
