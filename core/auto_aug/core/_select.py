"""``select``: apply one of several augmentations per sample, by a per-sample index, through
conditional execution (each augmentation runs on its samples only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ... import types
from ...graph import DataNode


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


def _warp_groups(ops: Sequence, kwargs: dict) -> list[list[int]]:
    """The indices of ``ops``, in leaves: each warp by a matrix (``Augmentation.warp_settings``)
    with the same warp, fill value and interpolation as another joins that one's leaf (in the
    place of its first member); any other op is a leaf of its own."""
    leaves: list[list[int]] = []
    by_settings: dict = {}
    for i, op in enumerate(ops):
        settings = getattr(op, "warp_settings", None)
        key = settings(kwargs) if settings is not None else None
        if key is not None:
            warp, fill, interp = key
            key = (warp, _key(fill), _key(interp))
            if key in by_settings:
                by_settings[key].append(i)
                continue
            leaves.append([i])
            by_settings[key] = leaves[-1]
        else:
            leaves.append([i])
    return leaves


def _key(value):
    """A hashable stand-in for a warp setting (a node or an array compares by identity)."""
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return ("id", id(value)) if isinstance(value, DataNode) else value


def _fused_warp(ops: Sequence, members: list[int], selected_op_idx, args: tuple, kwargs: dict):
    """One warp of the samples of the warp augmentations ``members`` (indices of ``ops``, all
    with the same warp settings): each sample's matrix is the one its own augmentation makes,
    picked by the same bisection over ``members`` (on the host), then one ``warp_affine``.
    Within these samples ``selected_op_idx`` takes the members' values only, so ``idx <=
    members[mid]`` splits them."""

    def matrix(lo: int, hi: int):
        if lo == hi:
            return ops[members[lo]].warp_matrix(*args, **kwargs)
        mid = (lo + hi) // 2
        return cond(
            selected_op_idx <= members[mid],
            lambda: matrix(lo, mid),
            lambda: matrix(mid + 1, hi),
        )

    warp, fill, interp = ops[members[0]].warp_settings(kwargs)
    data = args[0] if args else kwargs["data"]
    return warp(data, matrix(0, len(members) - 1), fill, interp)


def _split_leaves(lo: int, hi: int, leaves: list, leaf_of, run_leaf: Callable):
    """:func:`split_samples_among_ops` over leaves of ops: ``leaf_of`` is each sample's leaf."""
    if lo == hi:
        return run_leaf(leaves[lo])
    mid = (lo + hi) // 2
    return cond(
        leaf_of <= mid,
        lambda: _split_leaves(lo, mid, leaves, leaf_of, run_leaf),
        lambda: _split_leaves(mid + 1, hi, leaves, leaf_of, run_leaf),
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

    The geometric augmentations that warp by a matrix (shears, translations) share one
    ``warp_affine``: their samples are one branch, in which each sample's matrix is picked
    on the host. The outputs are those of one warp per augmentation (each sample is warped
    by its own matrix, with the same settings), for fewer GPU operators and launches
    (BENCHMARKS.md, "Automatic augmentation: fused warps").

    Example:
        >>> idx = fn.random.uniform(values=[0, 1], dtype=types.INT32)
        >>> images = select([augmentations.rotate, augmentations.shear_x], idx, images,
        ...                 magnitude_bin=signed_bin(5), num_magnitude_bins=11)
    """
    fusable = isinstance(selected_op_idx, DataNode) and (op_args or "data" in op_kwargs)
    leaves = _warp_groups(ops, op_kwargs) if fusable else []
    if len(leaves) in (0, len(ops)):  # nothing to fuse: one branch per op
        return split_samples_among_ops(0, len(ops) - 1, ops, selected_op_idx, op_args, op_kwargs)
    table = np.zeros(len(ops), np.int32)
    for leaf, members in enumerate(leaves):
        table[members] = leaf
    leaf_of = types.Constant(table)[selected_op_idx]

    def run_leaf(members: list[int]):
        if len(members) == 1:
            return ops[members[0]](*op_args, **op_kwargs)
        return _fused_warp(ops, members, selected_op_idx, op_args, op_kwargs)

    return _split_leaves(0, len(leaves) - 1, leaves, leaf_of, run_leaf)
