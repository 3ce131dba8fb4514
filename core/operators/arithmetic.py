"""Expressions on DataNodes: ``a * 2 + b``, comparisons, bitwise operators, ``dlpipe.math``.

DALI turns each operator of an expression into an ``ArithmeticGenericOp`` node; dlpipe does the
same while the graph is traced (:func:`arithm_op`), then, when the pipeline is built, folds
every expression node whose only consumer is another expression node into that consumer
(:func:`fuse_expressions`). An expression tree is then one operator: one pass over each sample
on the CPU, one fused elementwise kernel per batch on the GPU (``kernels/arithmetic.py``).

An expression is a tree of tuples (hashable, so compiled forms are memoised by it)::

    ("in", k)                     positional input k of the operator (a DataNode)
    ("const", value, dtype_name)  a scalar constant: Python scalars and types.ScalarConstant
    (op, child, ...)              an operation of _expr_types.ARITY (DALI's names: "add", "fdiv")

Semantics are DALI's (``arithmetic_meta.h``): the output type of each operation follows
``_expr_types.result_dtype``; each operand is converted to it (C ``static_cast``, integers
wrap) and the operation runs in that type. ``//`` on integers truncates toward zero (C
division) and on floats is plain division; ``%`` is C's ``%`` on integers and IEEE
``remainder`` on floats; an integer to a negative integer power is 0; integer division or
remainder by zero gives 0 (DALI leaves it undefined). Shapes broadcast as in numpy, per
sample (a per-sample scalar against a tensor included); shapes that do not broadcast raise.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError
from ..graph import (
    DataNode,
    Operator,
    OpNode,
    _call_operator,
    register,
    small_host_inputs,
)
from ..kernels.arithmetic import broadcast_shape, expression_batch
from . import _small
from ._expr_types import ARITY, COMPARISONS, DISPLAY, check_operation, result_dtype

__all__ = ["ArithmeticGenericOp", "arithm_op", "common_layout", "fuse_expressions", "plan"]

SCHEMA = "_arithmetic_generic_op"


# --- tracing: DataNode operators -> expression nodes ---------------------------------------------


def _nested_datanode(value) -> bool:
    if isinstance(value, list | tuple):
        return any(isinstance(x, DataNode) or _nested_datanode(x) for x in value)
    return False


def _const_leaf(value) -> tuple | None:
    """An expression leaf for a scalar constant, or None when ``value`` is not one."""
    from ..types import ScalarConstant, to_numpy_dtype

    if type(value) is bool:
        return ("const", value, "bool")
    if type(value) is int:
        if not -(2**31) <= value < 2**31:
            raise ArgumentError(
                f"the integer constant {value} does not fit in int32 (the type of a Python int "
                "in expressions); wrap it as types.Constant(value, dtype=types.INT64)"
            )
        return ("const", value, "int32")
    if type(value) is float:
        return ("const", value, "float32")  # DALI: a Python float is a float32 constant
    if isinstance(value, np.generic) and np.ndim(value) == 0:
        value = ScalarConstant(value)
    if isinstance(value, ScalarConstant):
        return ("const", value.value, to_numpy_dtype(value.dtype).name)
    return None


def _on_gpu(x: DataNode) -> DataNode:
    """A GPU operand for ``x``: a CPU ``constant`` node becomes the same constant made on the
    GPU (uploaded once, every sample pointing at it) instead of a copy of it every iteration
    (``types.Constant(array)`` times a GPU node: AutoAugment's contrast weights); any other
    CPU node is copied (``.gpu()``). Both add one node, so the seeds stay as they were."""
    src = x.source
    if x.device != "cpu" or src is None or src.op.schema != "constant" or src.inputs:
        return x.gpu()
    op = src.op
    data = "fdata" if op.value.dtype.kind in "fc" else "idata"
    kwargs = {data: op.value.reshape(-1).tolist(), "shape": list(op.value.shape)}
    kwargs.update(dtype=op.dtype, layout=op.layout or None, device="gpu")
    return _call_operator("constant", (), kwargs)[0]


def arithm_op(name: str, *inputs) -> DataNode:
    """Add the operation ``name`` (DALI's expression name) on ``inputs`` to the graph.

    Inputs are DataNodes, Python scalars, ``types.Constant`` values or arrays/lists (which
    become constant nodes). The operator runs on the GPU if any input does (CPU inputs are
    copied there), else on the CPU.

    Raises:
        TypeError: an input is a list holding DataNodes, or of an unsupported type, or no
            input is a DataNode.
    """
    from ..types import Constant

    display = DISPLAY.get(name, name)
    edges: list[DataNode] = []
    children = []
    for i, x in enumerate(inputs):
        if _nested_datanode(x):
            raise TypeError(
                f"The input {i} of operator `{display}` must be a `DataNode` or a compatible "
                f"constant. Got a `{type(x).__name__}` with nested `DataNode`(s).\n"
                "Did you pass a return value of an operator producing multiple outputs?"
            )
        if not isinstance(x, DataNode):
            leaf = _const_leaf(x)
            if leaf is not None:
                children.append(leaf)
                continue
            try:
                x = Constant(x)
            except TypeError as e:
                raise TypeError(
                    f"Argument {i} to arithmetic operation `{display}` is not supported: got "
                    f"{type(x).__name__}; expected a DataNode or a constant value of type "
                    "'bool', 'int', 'float', a list/array of them or types.Constant"
                ) from e
            if not isinstance(x, DataNode):  # a 0-d array: a scalar after all
                children.append(_const_leaf(x))
                continue
        children.append(("in", len(edges)))
        edges.append(x)
    if not edges:
        raise TypeError(
            f"at least one input of `{display}` must be a DataNode (an operator's output), "
            f"got {[type(x).__name__ for x in inputs]}"
        )
    device = "gpu" if any(e.device == "gpu" for e in edges) else "cpu"
    if device == "gpu":
        edges = [_on_gpu(e) for e in edges]
    expr = (name, *children)
    return _call_operator(SCHEMA, edges, {"expression": expr, "device": device})[0]


# --- typing: an expression and input types -> a flat program ----------------------------------


@functools.cache
def plan(expr: tuple, in_dtypes: tuple[str, ...]) -> tuple[tuple, ...]:
    """The expression as a list of steps in evaluation order (identical subtrees once).

    Each step is ``(kind, dtype_name, payload)``: ``("load", dt, k)``, ``("const", dt, value)``
    or ``("op", dt, (op, arg_steps, arg_dtypes))``, arg_steps indexing earlier steps. The last
    step is the result. Shared by the CPU evaluator and the GPU kernel generator.

    Raises:
        TypeError: DALI's checks (arithmetic on booleans only, bitwise on floats).
    """
    steps: list[tuple] = []
    seen: dict[tuple, int] = {}

    def visit(node: tuple) -> int:
        if node in seen:
            return seen[node]
        if node[0] == "in":
            step = ("load", in_dtypes[node[1]], node[1])
        elif node[0] == "const":
            step = ("const", node[2], node[1])
        else:
            op, args = node[0], [visit(c) for c in node[1:]]
            dts = tuple(steps[a][1] for a in args)
            check_operation(op, [np.dtype(d) for d in dts])
            step = ("op", result_dtype(op, dts).name, (op, tuple(args), dts))
        steps.append(step)
        seen[node] = len(steps) - 1
        return seen[node]

    visit(expr)
    return tuple(steps)


def format_expr(expr: tuple) -> str:
    """A readable form of an expression, for error messages: ``((&0 * 2) + &1)``."""
    if expr[0] == "in":
        return f"&{expr[1]}"
    if expr[0] == "const":
        return repr(expr[1])
    op, args = expr[0], [format_expr(c) for c in expr[1:]]
    if op in DISPLAY and len(args) == 2:
        return f"({args[0]} {DISPLAY[op]} {args[1]})"
    if op == "minus":
        return f"(-{args[0]})"
    return f"{op}({', '.join(args)})"


# --- CPU evaluation -------------------------------------------------------------------------------


def _c_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero; 0 where ``b == 0``."""
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        q = q + fix.astype(q.dtype)
    return np.where(b == 0, np.zeros_like(q), q)


def _ieee_remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's ``remainder``: ``a - n * b`` with ``n`` = ``a / b`` rounded half to even."""
    m = np.fmod(a, b)
    half = np.abs(b) / 2
    q = np.round((a - m) / b)
    odd = np.fmod(q, 2) != 0
    over = (np.abs(m) > half) | ((np.abs(m) == half) & odd)
    return np.where(over, m - np.copysign(np.abs(b), m), m)


def _int_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    neg = b < 0
    p = np.power(a, np.where(neg, np.zeros_like(b), b))
    return np.where(neg, np.zeros_like(p), p)


_UNARY_FLOAT = {
    "sqrt": np.sqrt,
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)),
    "cbrt": np.cbrt,
    "exp": np.exp,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "fabs": np.fabs,
    "floor": np.floor,
    "ceil": np.ceil,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
}
_COMPARE = {
    "eq": np.equal,
    "neq": np.not_equal,
    "lt": np.less,
    "leq": np.less_equal,
    "gt": np.greater,
    "geq": np.greater_equal,
}
_BITWISE = {"bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor}


def _compare_dtype(dts: Sequence[np.dtype]) -> np.dtype | None:
    """The type both operands of a comparison are converted to (C's usual arithmetic
    conversions when a float takes part; float16 compares as float32); None: compare the
    integers exactly (DALI's safe signed/unsigned comparison)."""
    floats = [d for d in dts if d.kind == "f"]
    if not floats:
        return None
    widest = max(floats, key=lambda d: d.itemsize)
    return np.dtype(np.float32) if widest.itemsize < 4 else widest


@functools.cache
def _compare_dtype_of(arg_dts: tuple) -> np.dtype | None:
    """:func:`_compare_dtype` of dtype names (or dtypes), once per combination."""
    return _compare_dtype([np.dtype(d) for d in arg_dts])


def _as(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``x.astype(dt, copy=False)``, without the call where ``x`` has that type already."""
    return x if x.dtype == dt else x.astype(dt)


def apply_op(op: str, dt: np.dtype, args: list[np.ndarray], arg_dts) -> np.ndarray:
    """One operation of a plan on numpy values (arrays or 0-d arrays), giving ``dt``."""
    if op in COMPARISONS:
        cdt = _compare_dtype_of(tuple(arg_dts))
        if cdt is not None:
            args = [_as(a, cdt) for a in args]
        return _COMPARE[op](args[0], args[1])
    # every other operation converts its operands to the output type first (static_cast)
    if dt.kind == "f" and dt.itemsize == 2 and op in _UNARY_FLOAT:
        x = args[0].astype(np.float32)  # half math runs in float, rounded once
        return _UNARY_FLOAT[op](x).astype(dt)
    a = [_as(x, dt) for x in args]
    if op in _UNARY_FLOAT:
        return _UNARY_FLOAT[op](a[0])
    if op == "plus":
        return a[0]
    if op == "minus":
        return np.negative(a[0])
    if op == "abs":
        return a[0] if dt.kind in "ub" else np.where(a[0] < 0, np.negative(a[0]), a[0])
    if op in _BITWISE:
        return _BITWISE[op](a[0], a[1])
    if op == "add":
        return np.add(a[0], a[1])
    if op == "sub":
        return np.subtract(a[0], a[1])
    if op == "mul":
        return np.logical_and(a[0], a[1]) if dt.kind == "b" else np.multiply(a[0], a[1])
    if op == "div":
        return np.true_divide(a[0], a[1]) if dt.kind == "f" else _c_div(a[0], a[1])
    if op == "fdiv":
        return np.true_divide(a[0], a[1])
    if op == "mod":
        if dt.kind == "f":
            wide = np.float32 if dt.itemsize <= 4 else np.float64
            return _ieee_remainder(a[0].astype(wide), a[1].astype(wide)).astype(dt)
        return np.where(a[1] == 0, np.zeros_like(a[0]), np.fmod(a[0], a[1]))
    if op == "min":
        return np.where(a[0] < a[1], a[0], a[1])
    if op == "max":
        return np.where(a[0] > a[1], a[0], a[1])
    if op in ("pow", "fpow"):
        return _int_pow(a[0], a[1]) if dt.kind in "iu" else np.power(a[0], a[1])
    if op == "atan2":
        return np.arctan2(a[0], a[1])
    if op == "clamp":
        x = np.where(a[0] < a[1], a[1], a[0])
        return np.where(x > a[2], a[2], x)
    raise ValueError(f"unknown expression operation {op!r}")


def quiet(steps: tuple) -> bool:
    """Whether a plan can raise no numpy floating-point error whatever its inputs, so that
    :func:`evaluate` needs no ``np.errstate`` (~3 us a call; the automatic augmentations'
    ~20 expressions a batch are nearly all such): integer or bool constants, and comparisons
    or integer add / sub / mul whose operands already have the operation's type (no cast;
    integer ufuncs wrap around silently)."""
    for kind, dt_name, payload in steps:
        if kind == "const":
            if np.dtype(dt_name).kind not in "iub":
                return False
        elif kind == "op":
            op, _, arg_dts = payload
            same = len(set(arg_dts)) == 1
            if op in COMPARISONS:
                cdt = _compare_dtype_of(tuple(arg_dts))
                if not same or (cdt is not None and cdt != np.dtype(arg_dts[0])):
                    return False
            elif not (
                op in ("add", "sub", "mul")
                and np.dtype(dt_name).kind in "iu"
                and same
                and arg_dts[0] == dt_name
            ):
                return False
        elif kind != "load":
            return False
    return True


def evaluate(steps: tuple, inputs: Sequence[np.ndarray], is_quiet: bool = False) -> np.ndarray:
    """Run a plan on one sample's inputs: a new C-contiguous array of the result type.
    ``is_quiet``: :func:`quiet` holds for ``steps`` (no ``np.errstate`` needed).

    Raises:
        ValueError: input shapes that do not broadcast.
    """
    return _run(_compiled(steps), inputs, is_quiet)


def _run(compiled: tuple, inputs: Sequence[np.ndarray], is_quiet: bool) -> np.ndarray:
    """:func:`_run_compiled`, under ``np.errstate`` unless the plan is quiet."""
    if is_quiet:
        return _run_compiled(compiled, inputs)
    with np.errstate(all="ignore"):  # integer wrap-around, division by zero: C semantics
        return _run_compiled(compiled, inputs)


@functools.cache
def _compiled(steps: tuple) -> tuple:
    """A plan as ``_run_compiled`` runs it (a sample's or a whole batch's values), made once
    per plan: ``(code, dtype, payload)`` per step, the dtype made, a constant's array made once (read-only: an operation that
    gives an operand back gives it back unchanged, and the result is copied if it is one),
    and whether an operation's operands need the broadcast check (more than one)."""
    out = []
    for kind, dt_name, payload in steps:
        dt = np.dtype(dt_name)
        if kind == "load":
            out.append((0, dt, payload))
        elif kind == "const":
            c = np.array(payload, dt)
            c.setflags(write=False)
            out.append((1, dt, c))
        else:
            op, arg_steps, arg_dts = payload
            out.append((2, dt, (op, arg_steps, arg_dts, len(arg_steps) > 1)))
    return tuple(out)


def _run_compiled(steps: tuple, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """Run a :func:`_compiled` plan: without per-step dtype lookups and constants made anew
    (the automatic augmentations run ~20 such expressions a batch: BENCHMARKS.md, "The CPU
    stage without per-sample lists")."""
    values: list = []
    for code, dt, payload in steps:
        if code == 0:
            v = np.asarray(inputs[payload])
        elif code == 1:
            v = payload
        else:
            op, arg_steps, arg_dts, several = payload
            args = [values[k] for k in arg_steps]
            if several:  # (0-d operands and equal shapes always broadcast)
                shapes = [a.shape for a in args]
                dims = set(shapes) - {()}
                if len(dims) > 1:
                    broadcast_shape(shapes)  # DALI's error, if any
            v = _as(np.asarray(apply_op(op, dt, args, arg_dts)), dt)
        values.append(v)
    out = values[-1]
    # a new writeable array (not an input or a constant kept as it is)
    return out if out.flags.c_contiguous and out.flags.writeable else out.copy()


# --- layouts --------------------------------------------------------------------------------------


def common_layout(layouts: Sequence[str], who: str = "arithmetic expression") -> str:
    """The output layout: the longest input layout; every other one must be its suffix.

    (DALI's layout broadcasting: ``"HWC"`` with ``"C"`` gives ``"HWC"``.) An input without a
    layout takes no part.

    Raises:
        ArgumentError: two layouts of which neither is a suffix of the other.
    """
    named = [lay for lay in layouts if lay]
    if not named:
        return ""
    longest = max(named, key=len)
    for lay in named:
        if not longest.endswith(lay):
            raise ArgumentError(
                f"{who}: the input layouts {longest!r} and {lay!r} are incompatible. They must "
                "be equal or one must be a suffix of the other"
            )
    return longest


# --- the operator ---------------------------------------------------------------------------------


@register
class ArithmeticGenericOp(Operator):
    """An expression tree over its inputs (what DataNode operators and ``dlpipe.math`` build).

    Args:
        expression: the expression tree (see the module docstring).
    """

    schema = SCHEMA
    devices = ("cpu", "gpu")
    num_inputs = (1, 64)
    reads_batch_arrays = True  # (run_batch_cpu: len, stack, per_sample)

    def setup(self, *, expression=None) -> None:
        if not isinstance(expression, tuple) or expression[0] not in ARITY:
            raise ArgumentError(f"{self.schema}: expression={expression!r} is not an expression")
        self.expression = expression
        self._plans: dict = {}  # (expression, input dtypes) -> plan, for the GPU
        self._cpu_plans: dict = {}  # input dtypes -> (plan of _cpu_plans_of, quiet(plan))
        self._cpu_plans_of = expression

    def output_layouts(self, input_layouts):
        return [common_layout(input_layouts, format_expr(self.expression))]

    def _steps(self, dtypes) -> tuple:
        return plan(self.expression, tuple(np.dtype(d).name for d in dtypes))

    def run_sample(self, inputs, args, param):
        steps = self._steps([np.asarray(x).dtype for x in inputs])
        return evaluate(steps, inputs)

    # Over small host inputs (random numbers, constants, subscripts of them) the expression
    # runs once over the stacked batch (operators/_small.py).
    def small_output_in(self, node) -> bool:
        return small_host_inputs(node)

    def batch_level_in(self, node) -> bool:
        return small_host_inputs(node)

    def run_batch_cpu(self, inputs, args, params):
        n = len(inputs[0]) if inputs else 0
        stacked = []
        for x in inputs:
            a = _small.stack(x)
            if a is None:
                break
            stacked.append(a)
        if n and len(stacked) == len(inputs):
            # each input's per-sample shape, right-aligned under the batch dimension, so
            # numpy broadcasts the samples as the per-sample path does
            ndim = max([a.ndim for a in stacked])
            aligned = [
                a if a.ndim == ndim else a.reshape(n, *(1,) * (ndim - a.ndim), *a.shape[1:])
                for a in stacked
            ]
            dtypes = tuple([a.dtype for a in stacked])
            if self._cpu_plans_of is not self.expression:  # (fusion replaces it at build time)
                self._cpu_plans, self._cpu_plans_of = {}, self.expression
            cached = self._cpu_plans.get(dtypes)
            if cached is None:
                steps = self._steps(dtypes)
                cached = self._cpu_plans[dtypes] = (_compiled(steps), quiet(steps))
            steps, is_quiet = cached
            try:
                out = _run(steps, aligned, is_quiet)
            except ValueError:  # shapes that do not broadcast: the per-sample error below
                out = None
            if out is not None:
                return (out,)
        return (_small.per_sample(self.run_sample, inputs, args, params, n),)

    def run_batch(self, inputs, args, params, stream):
        """GPU: one fused kernel for the whole tree and batch (``kernels/arithmetic.py``)."""
        dtypes = tuple(x.dtype for x in inputs)
        key = (self.expression, dtypes)  # (fusion may replace the expression at build time)
        steps = self._plans.get(key)
        if steps is None:  # (dtype names cost more than the lookup, per operator and batch)
            steps = self._plans[key] = self._steps(dtypes)
        return expression_batch(steps, inputs, stream=stream)


# --- build time: one operator per expression tree -------------------------------------------------


def fuse_expressions(ops: list[OpNode], outputs: Sequence[DataNode]) -> list[OpNode]:
    """Fold each expression node whose output only one expression node reads into that node.

    ``ops`` is in topological order; the consumer takes the producer's inputs and its
    expression replaces the consumer's ``("in", k)`` leaf. A node whose output is a pipeline
    output, is read by anything else, or lies in another conditional scope stays. Returns the
    remaining nodes, in order.
    """
    readers: dict[int, int] = {}
    for node in ops:
        for x in (*node.inputs, *node.arg_nodes.values()):
            readers[id(x)] = readers.get(id(x), 0) + 1
    for x in outputs:
        readers[id(x)] = readers.get(id(x), 0) + 2
    absorbed: set[int] = set()
    for node in ops:
        if node.op.schema == SCHEMA:
            _Fuser(node, readers, absorbed).run()
    return [n for n in ops if id(n) not in absorbed]


class _Fuser:
    """Rewrites one expression node with the expressions of the producers it absorbs."""

    def __init__(self, node: OpNode, readers: dict[int, int], absorbed: set[int]):
        self.node = node
        self.readers = readers
        self.absorbed = absorbed
        self.inputs: list[DataNode] = []

    def run(self) -> None:
        self.node.op.expression = self.inline(self.node.op.expression)
        self.node.inputs = self.inputs

    def index_of(self, x: DataNode) -> int:
        for k, y in enumerate(self.inputs):
            if y is x:
                return k
        self.inputs.append(x)
        return len(self.inputs) - 1

    def rebase(self, expr: tuple, inputs: list[DataNode]) -> tuple:
        if expr[0] == "in":
            return ("in", self.index_of(inputs[expr[1]]))
        if expr[0] == "const":
            return expr
        return (expr[0], *(self.rebase(c, inputs) for c in expr[1:]))

    def inline(self, expr: tuple) -> tuple:
        if expr[0] == "const":
            return expr
        if expr[0] != "in":
            return (expr[0], *(self.inline(c) for c in expr[1:]))
        x = self.node.inputs[expr[1]]
        src = x.source
        if (
            src is not None
            and src.op.schema == SCHEMA
            and self.readers.get(id(x), 0) == 1
            and src.device == self.node.device
            and getattr(src, "scope", None) is getattr(self.node, "scope", None)
        ):
            self.absorbed.add(id(src))
            return self.rebase(src.op.expression, src.inputs)
        return ("in", self.index_of(x))
