"""``dlpipe.math``: DALI's ``nvidia.dali.math`` functions on DataNodes.

Each call adds an expression node (``operators/arithmetic.py``), fused with the expression it
is part of. Arguments are DataNodes, Python scalars or ``types.Constant`` values; at least one
must be a DataNode. Types follow DALI: the float functions (``sqrt``, ``exp``, ``sin``,
``floor``, ``fpow``, ``atan2``, ...) give float32 for integer inputs and keep float types;
``abs`` keeps the type; ``min``, ``max``, ``pow`` and ``clamp`` promote their inputs' types.
Booleans are rejected (as in DALI) except where noted.

Example:
    >>> from dlpipe import math
    >>> clipped = math.clamp(images * 1.25, 0, 255)
    >>> gamma = math.pow(images / 255.0, 2.2)
"""

from __future__ import annotations

from .graph import DataNode
from .operators.arithmetic import arithm_op

__all__ = [
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "cbrt",
    "ceil",
    "clamp",
    "cos",
    "cosh",
    "exp",
    "fabs",
    "floor",
    "fpow",
    "log",
    "log10",
    "log2",
    "max",
    "min",
    "pow",
    "rsqrt",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
]

_FLOAT_NOTE = "An integer input gives float32; a float input keeps its type."

_UNARY = {
    "sqrt": "Square root of each value.",
    "rsqrt": "Reciprocal of the square root of each value.",
    "cbrt": "Cube root of each value.",
    "exp": "Exponential (base e) of each value.",
    "log": "Natural logarithm of each value.",
    "log2": "Base-2 logarithm of each value.",
    "log10": "Base-10 logarithm of each value.",
    "fabs": "Absolute value of each value, as a float.",
    "floor": "Floor of each value (as a float).",
    "ceil": "Ceiling of each value (as a float).",
    "sin": "Sine of each value.",
    "cos": "Cosine of each value.",
    "tan": "Tangent of each value.",
    "asin": "Arc sine of each value.",
    "acos": "Arc cosine of each value.",
    "atan": "Arc tangent of each value.",
    "sinh": "Hyperbolic sine of each value.",
    "cosh": "Hyperbolic cosine of each value.",
    "tanh": "Hyperbolic tangent of each value.",
    "asinh": "Inverse hyperbolic sine of each value.",
    "acosh": "Inverse hyperbolic cosine of each value.",
    "atanh": "Inverse hyperbolic tangent of each value.",
}


def _make_unary(name: str, doc: str):
    def fn(input) -> DataNode:
        return arithm_op(name, input)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{doc}\n\n{_FLOAT_NOTE}\n\nArgs:\n    input: a DataNode.\n"
    return fn


sqrt = _make_unary("sqrt", _UNARY["sqrt"])
rsqrt = _make_unary("rsqrt", _UNARY["rsqrt"])
cbrt = _make_unary("cbrt", _UNARY["cbrt"])
exp = _make_unary("exp", _UNARY["exp"])
log = _make_unary("log", _UNARY["log"])
log2 = _make_unary("log2", _UNARY["log2"])
log10 = _make_unary("log10", _UNARY["log10"])
fabs = _make_unary("fabs", _UNARY["fabs"])
floor = _make_unary("floor", _UNARY["floor"])
ceil = _make_unary("ceil", _UNARY["ceil"])
sin = _make_unary("sin", _UNARY["sin"])
cos = _make_unary("cos", _UNARY["cos"])
tan = _make_unary("tan", _UNARY["tan"])
asin = _make_unary("asin", _UNARY["asin"])
acos = _make_unary("acos", _UNARY["acos"])
atan = _make_unary("atan", _UNARY["atan"])
sinh = _make_unary("sinh", _UNARY["sinh"])
cosh = _make_unary("cosh", _UNARY["cosh"])
tanh = _make_unary("tanh", _UNARY["tanh"])
asinh = _make_unary("asinh", _UNARY["asinh"])
acosh = _make_unary("acosh", _UNARY["acosh"])
atanh = _make_unary("atanh", _UNARY["atanh"])


def abs(input) -> DataNode:
    """Absolute value of each value; the type is kept (unsigned values are unchanged)."""
    return arithm_op("abs", input)


def min(left, right) -> DataNode:
    """Element-wise minimum; the type follows the promotion rules."""
    return arithm_op("min", left, right)


def max(left, right) -> DataNode:
    """Element-wise maximum; the type follows the promotion rules."""
    return arithm_op("max", left, right)


def pow(base, exponent) -> DataNode:
    """``base ** exponent``; the type follows the promotion rules (an integer to a negative
    integer power gives 0)."""
    return arithm_op("pow", base, exponent)


def fpow(base, exponent) -> DataNode:
    """``base ** exponent`` in floating point: integer inputs give float32."""
    return arithm_op("fpow", base, exponent)


def atan2(x, y) -> DataNode:
    """Arc tangent of ``x / y`` using the signs of both (C's ``atan2(x, y)``); integer inputs
    give float32."""
    return arithm_op("atan2", x, y)


def clamp(value, lo, hi) -> DataNode:
    """``value`` clamped to ``[lo, hi]`` (``hi`` wins where ``lo > hi``, as numpy's ``clip``);
    the type follows the promotion rules over all three."""
    return arithm_op("clamp", value, lo, hi)
