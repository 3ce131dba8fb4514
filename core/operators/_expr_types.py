"""The operations of DALI's expressions and their type rules (``arithmetic_meta.h/.cc``).

DALI evaluates an expression tree node by node; each function node's output type comes from
its inputs' types (``TypePromotion``):

* functions that give floats for integer inputs (``/``, ``sqrt``, ``exp``, ``sin``, ``floor``,
  ``fpow``, ``atan2``, ...): FLOAT (float32) when every input is integral (bool included);
* any other one-input function (``-x``, ``abs``): the input's type;
* comparisons: BOOL;
* the rest: the inputs' types combined pairwise, left to right, by :func:`binary_promote`.

After the types are known DALI rejects arithmetic on booleans only (``bool + bool``; ``*`` is
allowed) and bitwise operators on floats. These checks run when the first batch arrives, since
input types are known then. Python scalars are typed before they get here: ``bool`` -> BOOL,
``int`` -> INT32, ``float`` -> FLOAT (DALI's ``_to_type_desc``); ``types.Constant`` keeps its
``dtype``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

__all__ = [
    "ARITY",
    "DISPLAY",
    "binary_promote",
    "check_operation",
    "result_dtype",
]

UNARY_SAME = ("plus", "minus", "abs")
# IsIntToFloatResult: integral (bool included) inputs give float32
INT_TO_FLOAT = (
    "fdiv",
    "sqrt",
    "rsqrt",
    "cbrt",
    "exp",
    "log",
    "log2",
    "log10",
    "fabs",
    "floor",
    "ceil",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "fpow",
    "atan2",
)
COMPARISONS = ("eq", "neq", "lt", "leq", "gt", "geq")
BITWISE = ("bitand", "bitor", "bitxor")
BINARY_ARITH = ("add", "sub", "mul", "div", "fdiv", "mod", "min", "max", "pow", "fpow", "atan2")

ARITY: dict[str, int] = {
    **dict.fromkeys(UNARY_SAME, 1),
    **{op: 1 for op in INT_TO_FLOAT if op not in ("fdiv", "fpow", "atan2")},
    **dict.fromkeys(BINARY_ARITH, 2),
    **dict.fromkeys(COMPARISONS, 2),
    **dict.fromkeys(BITWISE, 2),
    "clamp": 3,
}

# IsArithmetic: every operation but comparisons and bitwise ones
ARITHMETIC = frozenset(ARITY) - frozenset(COMPARISONS) - frozenset(BITWISE)

# How an operation is named in error messages (the Python operator where there is one)
DISPLAY = {
    "add": "+",
    "sub": "-",
    "plus": "(unary) +",
    "minus": "(unary) -",
    "mul": "*",
    "pow": "**",
    "div": "//",
    "fdiv": "/",
    "mod": "%",
    "bitand": "&",
    "bitor": "|",
    "bitxor": "^",
    "eq": "==",
    "neq": "!=",
    "lt": "<",
    "leq": "<=",
    "gt": ">",
    "geq": ">=",
}

BOOL = np.dtype(np.bool_)
FLOAT32 = np.dtype(np.float32)


def _is_integral(dt: np.dtype) -> bool:
    return dt.kind in "biu"


@functools.cache
def binary_promote(left: np.dtype, right: np.dtype) -> np.dtype:
    """DALI's ``binary_op_promotion<L, R>`` (commutative).

    Rules: T+T = T; a float wins over any non-float; two floats give the wider one; bool
    gives way to any other type; two signed (or two unsigned) integers give the wider one;
    intX + uintY gives intX if X > Y, else the signed type of twice Y's width, capped at int64.
    """
    left, right = np.dtype(left), np.dtype(right)
    if left == right:
        return left
    lf, rf = left.kind == "f", right.kind == "f"
    if lf or rf:
        if lf and rf:
            return left if left.itemsize > right.itemsize else right
        return left if lf else right
    if left.kind == "b":
        return right
    if right.kind == "b":
        return left
    if left.kind == right.kind:  # both signed or both unsigned
        return left if left.itemsize > right.itemsize else right
    signed, unsigned = (left, right) if left.kind == "i" else (right, left)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return np.dtype(f"i{min(2 * unsigned.itemsize, 8)}")


def result_dtype(op: str, dtypes: Sequence[np.dtype]) -> np.dtype:
    """The output type of ``op`` for inputs of ``dtypes`` (DALI's ``TypePromotion``)."""
    dtypes = [np.dtype(d) for d in dtypes]
    if op in INT_TO_FLOAT and all(_is_integral(d) for d in dtypes):
        return FLOAT32
    if len(dtypes) == 1:
        return dtypes[0]
    if op in COMPARISONS:
        return BOOL
    out = binary_promote(dtypes[0], dtypes[1])
    for d in dtypes[2:]:
        out = binary_promote(out, d)
    return out


def check_operation(op: str, dtypes: Sequence[np.dtype]) -> None:
    """DALI's ``CheckArithmeticOnBooleans`` and ``CheckBitwise``.

    Raises:
        TypeError: arithmetic (other than ``*``) whose inputs are all booleans, or a bitwise
            operator with a floating-point input.
    """
    name = DISPLAY.get(op, op)
    if op in ARITHMETIC and op != "mul" and all(np.dtype(d) == BOOL for d in dtypes):
        if len(dtypes) == 1:
            raise TypeError(
                f"Input to arithmetic operator `{name}` cannot be a boolean. Consider using "
                "bitwise operator `~` or an numeric type."
            )
        raise TypeError(
            f"Inputs to arithmetic operator `{name}` cannot be booleans. Consider using "
            "bitwise operators `|`, `&`, `^` or a numeric type as one of the inputs to force "
            "type promotions of the booleans. Note: using `*` (multiplication) is still "
            "allowed for boolean inputs."
        )
    if op in BITWISE and not all(_is_integral(np.dtype(d)) for d in dtypes):
        raise TypeError(f"Inputs to bitwise operator `{name}` must be of integral type.")
