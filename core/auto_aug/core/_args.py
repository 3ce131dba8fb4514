"""Signature helpers of the augmentation wrappers: which extra keyword arguments an
augmentation accepts or requires, and the errors for missing or unused ones."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable

from ...errors import ArgumentError

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_POSITIONAL = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)


class MissingArgException(ArgumentError):
    """An augmentation needs a keyword argument the call did not give (e.g. ``shape``)."""

    def __init__(self, message: str, augmentation, missing_args: list[str]):
        super().__init__(message)
        self.augmentation = augmentation
        self.missing_args = missing_args


class UnusedArgException(ArgumentError):
    """A keyword argument that none of the augmentations takes."""

    def __init__(self, message: str, unused_args: list[str]):
        super().__init__(message)
        self.unused_args = unused_args


def _params_after(fun: Callable, skip_positional: int) -> list[inspect.Parameter]:
    """The parameters of ``fun`` but its first ``skip_positional`` positional ones."""
    params = list(inspect.signature(fun).parameters.values())
    return [p for i, p in enumerate(params) if i >= skip_positional or p.kind not in _POSITIONAL]


def filter_extra_accepted_kwargs(fun: Callable, kwargs: dict, skip_positional: int = 0) -> dict:
    """The entries of ``kwargs`` that ``fun`` takes by name (after its first
    ``skip_positional`` positional parameters)."""
    names = {p.name for p in _params_after(fun, skip_positional) if p.kind in _NAMED}
    return {k: v for k, v in kwargs.items() if k in names}


def get_required_kwargs(fun: Callable, skip_positional: int = 0) -> list[str]:
    """Names of the parameters of ``fun`` without a default (after the skipped ones)."""
    return [
        p.name
        for p in _params_after(fun, skip_positional)
        if p.default is inspect.Parameter.empty and p.kind in _NAMED
    ]


def get_num_positional_args(fun: Callable) -> int:
    """How many arguments ``fun`` takes positionally."""
    return sum(p.kind in _POSITIONAL for p in inspect.signature(fun).parameters.values())


def get_missing_kwargs(fun: Callable, kwargs: dict, skip_positional: int = 0) -> list[str]:
    return [n for n in get_required_kwargs(fun, skip_positional) if n not in kwargs]


def filter_unused_args(augmentations: Iterable, kwargs: dict) -> list[str]:
    """Names in ``kwargs`` that no augmentation's op takes."""
    used = {
        name for aug in augmentations for name in filter_extra_accepted_kwargs(aug.op, kwargs, 2)
    }
    return [name for name in kwargs if name not in used]


def forbid_unused_kwargs(augmentations: Iterable, kwargs: dict, call_name: str) -> None:
    """Raise :class:`UnusedArgException` for keyword arguments no augmentation takes."""
    unused = filter_unused_args(augmentations, kwargs)
    if unused:
        subject, verb = ("kwarg", "is") if len(unused) == 1 else ("kwargs", "are")
        raise UnusedArgException(
            f"The {call_name} got unexpected {subject}. The {subject} `{', '.join(unused)}` "
            f"{verb} not used by any of the augmentations.",
            unused_args=unused,
        )
