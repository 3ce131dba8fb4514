"""Argument checks at the API edge: the type and range of a Pipeline or operator argument,
each error naming the argument and the value it got.

Two users:

* ``Pipeline.__init__`` checks each of its arguments with :func:`check_int` /
  :func:`check_bool` (``batch_size="8"`` from an argparse option without ``type=int`` is
  refused right there, with a hint, instead of failing later inside the engine).
* ``graph._call_operator`` calls :func:`check_operator_args` for every operator, so every
  operator, including those added later, gets the same type check without code of its own:
  a string where the operator's signature expects a number (its default is a number, or a
  tuple of numbers) names the operator and the argument. Ranges stay with each operator's
  ``setup``, which knows them.

Only strings (and bytes) are refused where a number is expected: dlpipe's defaults are
sometimes ints where DALI's argument is a float (``fill_value=0``), so a float given for an
int default is not evidence of a mistake, while a string never is a number in DALI.
"""

from __future__ import annotations

import enum
import functools
import inspect
import numbers
import re
from typing import Any

import numpy as np

from .errors import ArgumentError, ArgumentTypeError

__all__ = ["CPU_ONLY_DEVICE_ID", "check_bool", "check_int", "check_operator_args", "describe"]

# DALI's ``types.CPU_ONLY_DEVICE_ID``: a device_id meaning "no GPU", like None
CPU_ONLY_DEVICE_ID = -99999


def describe(name: str, value: Any) -> str:
    """``name=value`` as the user wrote it: ``batch_size='8'``."""
    return f"{name}={value!r}"


def _hint(value: Any, want: str) -> str:
    """The advice for a value of the wrong type: numeric strings get the argparse hint."""
    if isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        try:
            float(text)
        except ValueError:
            return f"pass {want}"
        if want.startswith("True"):
            return f"pass {want}"
        kind = "float" if want == "a number" else "int"
        return f"pass {want} (argparse: type={kind})"
    return f"pass {want}"


def is_int(value: Any) -> bool:
    """An integer that is not a bool (numpy integers included)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def check_int(
    value: Any,
    name: str,
    *,
    minimum: int | None = None,
    allowed: tuple = (),
    who: str = "Pipeline",
) -> int:
    """``value`` as an int, refusing other types and values below ``minimum``.

    Args:
        value: what the user passed.
        name: the argument's name, for the message.
        minimum: the smallest value accepted (None: any).
        allowed: values accepted besides (a ``-1`` meaning "unset").
        who: the API the argument belongs to, for the message.

    Raises:
        ArgumentTypeError: not an integer (a float, even 2.0, a str, a bool).
        ArgumentError: below ``minimum``.
    """
    if not is_int(value):
        raise ArgumentTypeError(
            f"{who}: {describe(name, value)} is a {type(value).__name__}; {_hint(value, 'an int')}"
        )
    value = int(value)
    if minimum is not None and value < minimum and value not in allowed:
        also = "".join(f" or {a}" for a in allowed)
        raise ArgumentError(f"{who}: {describe(name, value)} must be >= {minimum}{also}")
    return value


def check_bool(value: Any, name: str, *, who: str = "Pipeline") -> bool:
    """``value`` as a bool: True/False (numpy's too) or the ints 0 and 1. A string is refused,
    ``"False"`` being true."""
    if isinstance(value, bool | np.bool_) or (is_int(value) and value in (0, 1)):
        return bool(value)
    raise ArgumentTypeError(
        f"{who}: {describe(name, value)} is a {type(value).__name__}; pass True or False"
    )


# --- operators ------------------------------------------------------------------------------


def _numeric(value: Any) -> bool:
    """A number a signature default can be: int, float or bool, not an enum member (enum
    arguments take their names as strings at the API edge)."""
    return isinstance(value, numbers.Number | np.bool_) and not isinstance(value, enum.Enum)


_NUMBER_WORDS = {"int", "float", "bool"}
_CONTAINER_WORDS = {"None", "Optional", "Sequence", "tuple", "list"}


def _annotation_kind(annotation: Any) -> str | None:
    """The kind ("bool", "int" or "number") when an annotation (a string, under ``from
    __future__ import annotations``) names only numbers, containers of them and None:
    ``float | None``, ``Sequence[int]``."""
    if not isinstance(annotation, str):
        return None
    words = set(re.findall(r"[A-Za-z_]+", annotation)) - _CONTAINER_WORDS
    if not words or not words <= _NUMBER_WORDS:
        return None
    return "bool" if words == {"bool"} else "int" if words == {"int"} else "number"


def _expected_kind(param: inspect.Parameter) -> str | None:
    """The kind ("bool", "int" or "number") when ``param`` takes numbers, by its default (a
    number, or a non-empty tuple or list of numbers) or else by its annotation; None
    otherwise. ("int" only picks the argparse hint: an int default does not refuse floats.)
    An enum default (``output_type=types.RGB``) is not a number: enums take names too."""
    d = param.default
    if isinstance(d, enum.Enum):
        return None
    if isinstance(d, bool | np.bool_):
        return "bool"
    if is_int(d):
        return "int"
    if _numeric(d) or (isinstance(d, tuple | list) and bool(d) and all(_numeric(x) for x in d)):
        return "number"
    if d is None or d is inspect.Parameter.empty:
        return _annotation_kind(param.annotation)
    return None


@functools.cache
def _numeric_args(cls: type) -> dict[str, str]:
    """The keyword arguments of ``cls.setup`` that take numbers: name -> their kind."""
    params = inspect.signature(cls.setup).parameters
    kinds = {n: _expected_kind(p) for n, p in params.items() if p.kind is p.KEYWORD_ONLY}
    return {n: k for n, k in kinds.items() if k is not None}


def check_operator_args(cls: type, schema: str, kwargs: dict) -> None:
    """Refuse a string given for an argument of operator ``cls`` that takes numbers (also as
    an element of a list), and a seed that is not an int.

    Args:
        cls: the operator class (its ``setup`` signature says which arguments are numeric).
        schema: the operator's name, for the message.
        kwargs: the call's static (non-DataNode) keyword arguments.

    Raises:
        ArgumentTypeError: naming the operator, the argument and its value.
    """
    seed = kwargs.get("seed")
    if seed is not None and not is_int(seed):
        raise ArgumentTypeError(
            f"{schema}: {describe('seed', seed)} is a {type(seed).__name__}; "
            f"{_hint(seed, 'an int')}"
        )
    numeric = _numeric_args(cls)
    for name, value in kwargs.items():
        kind = numeric.get(name)
        if kind is None:
            continue
        bad = value
        if isinstance(value, list | tuple):
            bad = next((x for x in value if isinstance(x, str | bytes)), None)
        if isinstance(bad, str | bytes):
            where = "" if bad is value else f" (element {bad!r})"
            want = {"bool": "True or False", "int": "a number (an int)"}.get(kind, "a number")
            raise ArgumentTypeError(
                f"{schema}: argument {describe(name, value)}{where} is a str; {_hint(bad, want)}"
            )
