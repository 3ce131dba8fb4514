"""``select``: apply one of several augmentations per sample, by a per-sample index, through
conditional execution (each augmentation runs on its samples only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def cond(predicate, if_true: Callable[[], Any], if_false: Callable[[], Any]):
    """``if_true() if predicate else if_false()``, per sample when ``predicate`` is a DataNode
    (an ``if`` of a conditionals pipeline: both sides traced, each run on its samples, the
    results merged); a Python value picks one side, as Python does."""
    from ..._conditionals import if_stmt

    box: list = [None]

    def set_state(state):
        box[0] = state[0]

    def body():
        box[0] = if_true()

    def orelse():
        box[0] = if_false()

    if_stmt(predicate, body, orelse, lambda: (box[0],), set_state, ("data",))
    return box[0]


def split_samples_among_ops(lo: int, hi: int, ops: Sequence, selected_op_idx, args, kwargs):
    """Apply ``ops[lo..hi]`` by bisection: ``idx <= mid`` splits the batch in two."""
    if lo == hi:
        return ops[lo](*args, **kwargs)
    mid = (lo + hi) // 2
    return cond(
        selected_op_idx <= mid,
        lambda: split_samples_among_ops(lo, mid, ops, selected_op_idx, args, kwargs),
        lambda: split_samples_among_ops(mid + 1, hi, ops, selected_op_idx, args, kwargs),
    )


def select(ops: Sequence[Callable], selected_op_idx, *op_args, **op_kwargs):
    """Apply ``ops[selected_op_idx]`` to each sample, as if by calling
    ``ops[selected_op_idx](*op_args, **op_kwargs)``.

    Args:
        ops: the operations (augmentations, or any functions of DataNodes).
        selected_op_idx: a per-sample node of ints in ``[0, len(ops) - 1]``.
        *op_args, **op_kwargs: passed to the selected operation; DataNodes among them are
            split with the batch.

    Returns:
        The batch, each sample processed by its operation.

    Example:
        >>> idx = fn.random.uniform(values=[0, 1], dtype=types.INT32)
        >>> images = select([augmentations.rotate, augmentations.shear_x], idx, images,
        ...                 magnitude_bin=signed_bin(5), num_magnitude_bins=11)
    """
    return split_samples_among_ops(0, len(ops) - 1, ops, selected_op_idx, op_args, op_kwargs)
