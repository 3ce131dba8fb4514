"""``fn.cat``: concatenate the inputs' samples along an existing axis (DALI's ``Cat``); the
shared rules are in ``_join.py``."""

from __future__ import annotations

from ..graph import register
from ._join import Join

__all__ = ["Cat"]


@register(legacy=("Cat",))
class Cat(Join):
    """Joins the i-th samples of all inputs along an existing axis.

    The shapes must match in every axis but ``axis``; the layout is the inputs'.

    Args:
        axis: the axis to join along (default 0).
        axis_name: the same by layout letter (exclusive with ``axis``).

    Example:
        >>> with pipe:
        ...     boxes = fn.cat(boxes_a, boxes_b, axis=0)  # (Na + Nb, 4)
    """

    schema = "cat"
    new_axis = False
