"""``fn.stack``: stack the inputs' samples along a new axis (DALI's ``Stack``); the shared
rules are in ``_join.py``."""

from __future__ import annotations

from ..graph import register
from ._join import Join

__all__ = ["Stack"]


@register(legacy=("Stack",))
class Stack(Join):
    """Joins the i-th samples of all inputs along a new axis.

    The shapes must match. ``axis`` is the new axis' place in the output (0: whole samples
    stacked; the inputs' rank: their values interleaved).

    Args:
        axis: where the new axis goes (default 0).
        axis_name: the new axis' layout letter, inserted into the input layout (without it
            the output has no layout).

    Example:
        >>> with pipe:
        ...     xy = fn.stack(x, y, axis=1)  # two (N,) inputs -> (N, 2)
    """

    schema = "stack"
    new_axis = True
