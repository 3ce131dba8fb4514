"""``_conditional_validate``: checks the predicate of an ``if`` (or an operand of ``and`` /
``or``) on a DataNode, per sample, and gives it as a bool scalar (DALI's
``_conditional.validate_logical`` and the ``if`` check of ``_conditional.split``)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register, small_host_inputs
from . import _small

# DALI's explanation after every error about predicates (``validation.cc``)
SUGGESTION = (
    "\n\nThis input restriction allows the logical expressions to always return scalar boolean "
    "outputs and to be used in unambiguous way in DALI conditionals (`if` statements). "
    "You can set the `dtype` parameter of some operators to `dlpipe.types.BOOL` "
    "or use comparison operators which always return booleans.\n"
    "If you need to process inputs of higher dimensionality, different type, or device placement, "
    "you may use bitwise arithmetic operators `&`, `|` or comparison operator (`== 0`) "
    "to emulate logical `and`, `or` and `not` expressions.  Those operations performed on "
    "boolean inputs are equivalent to logical expressions. Keep in mind that, in contrast to "
    "using logical operators, all subexpressions of elementwise arithmetic operators are always "
    "evaluated."
)


def restriction(name: str, enforce_type: bool) -> str:
    start = (
        "Conditions inside `if` statements are restricted to"
        if name == "if"
        else f"Logical expression `{name}` is restricted to"
    )
    kind = " of `bool` type" if enforce_type else ""
    return f"{start} scalar (0-d tensors) inputs{kind}, that are placed on CPU."


def placement(name: str, side: str) -> str:
    if name == "if":
        return " as a condition of the `if` statement."
    if name in ("and", "or"):
        return f" as the {side} argument in logical expression."
    return " in logical expression."


def check_predicate(value, name: str, side: str, enforce_type: bool) -> np.bool_:
    """One sample of a predicate: a 0-d value (a bool when ``enforce_type``), as a bool.

    Raises:
        ValueError: not 0-d. TypeError: not bool where required.
    """
    a = np.asarray(value)
    head, where = restriction(name, enforce_type), placement(name, side)
    if a.ndim != 0:
        raise ValueError(f"{head} Got a {a.ndim}-d input{where}{SUGGESTION}")
    if enforce_type and a.dtype != np.bool_:
        raise TypeError(f"{head} Got an input of type `{a.dtype}`{where}{SUGGESTION}")
    return np.bool_(a != 0)


@register
class ConditionalValidate(Operator):
    """Validates a predicate (``if``: any scalar type; ``and``/``or``: bool scalars).

    Args:
        expression_name: ``"if"``, ``"and"`` or ``"or"``.
        expression_side: ``"left"`` or ``"right"`` for ``and``/``or``.
    """

    schema = "_conditional_validate"
    devices = ("cpu",)
    light = True
    reads_batch_arrays = True  # (run_batch_cpu: len, stack, per_sample)

    def setup(self, *, expression_name="if", expression_side="") -> None:
        if expression_name not in ("if", "and", "or"):
            raise ArgumentError(f"{self.schema}: expression_name={expression_name!r}")
        self.expression_name = expression_name
        self.expression_side = expression_side

    def output_layouts(self, input_layouts):
        return [""]

    def run_sample(self, inputs, args, param):
        name = self.expression_name
        return np.asarray(check_predicate(inputs[0], name, self.expression_side, name != "if"))

    def small_output_in(self, node) -> bool:
        return small_host_inputs(node)

    def batch_level_in(self, node) -> bool:
        return small_host_inputs(node)

    def run_batch_cpu(self, inputs, args, params):
        """Over small host inputs: the whole batch checked at once; a batch with any sample
        the check refuses goes per sample, which names the sample."""
        n = len(inputs[0])
        x = _small.stack(inputs[0])
        bool_only = self.expression_name != "if"
        if x is not None and x.ndim == 1 and (not bool_only or x.dtype == np.bool_):
            return (x != 0,)
        return (_small.per_sample(self.run_sample, inputs, args, params, n),)
