"""``select``: apply one of several augmentations per sample, by a per-sample index, through
conditional execution (each augmentation runs on its samples only).

The ops are split by bisection over the index (``idx <= mid``), as DALI does; the standard
geometric and value-wise augmentations are first gathered into one leaf each (see
:func:`select`), so that each group runs as one operator on the GPU."""

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


def _fusion_key(op, kwargs: dict):
    """What ``op`` may share its leaf with: ``("warp", fill, interp)`` for a warp by a matrix
    or the rotation keeping the size (``Augmentation.warp_settings``), ``("lookup",)`` for a
    value-wise map of uint8 values (``Augmentation.lookup_table``, or one by statistics:
    ``augmentations._map_by_stats``), None for any other op."""
    settings = getattr(op, "warp_settings", None)
    key = settings(kwargs) if settings is not None else None
    if key is not None:
        _, fill, interp = key
        return ("warp", _key(fill), _key(interp))
    if _static_table(op, kwargs) is not None or _stats_params(op, kwargs) is not None:
        return ("lookup",)
    return None


def _static_table(op, kwargs: dict) -> np.ndarray | None:
    """The tables of a value-wise map of uint8 values (``Augmentation.lookup_table``), None
    for any other op."""
    lookup = getattr(op, "lookup_table", None)
    return lookup(*_bins(kwargs)) if lookup is not None else None


def _stats_params(op, kwargs: dict) -> np.ndarray | None:
    """For a value-wise map by the data's statistics or a float parameter
    (``augmentations._map_by_stats``): its float32 parameters, one per row of its parameters
    (one 0 for an op without); None for any other op, or parameters that are not one float32
    each (a custom ``mag_to_param``)."""
    from ...errors import ArgumentError
    from ._augmentation import Augmentation

    if not isinstance(op, Augmentation) or getattr(op.op, "point_kind", None) is None:
        return None
    try:
        rows = op._param_rows(*_bins(kwargs))
    except ArgumentError:  # the op's own call tells what is wrong
        return None
    if rows is None:
        return np.zeros(1, np.float32)
    return rows if rows.ndim == 1 and rows.dtype == np.float32 else None


def _bins(kwargs: dict) -> tuple:
    return kwargs.get("magnitude_bin"), kwargs.get("num_magnitude_bins")


def _groups(ops: Sequence, kwargs: dict) -> list[tuple]:
    """The indices of ``ops`` in leaves, ``(key, members)``: the ops of one fusion key
    (:func:`_fusion_key`) share the leaf of the first of them; any other op is a leaf of its
    own (key None)."""
    leaves: list[tuple] = []
    by_key: dict = {}
    rotations: set = set()  # the warp leaves that have their rotation
    for i, op in enumerate(ops):
        key = _fusion_key(op, kwargs)
        if key is not None and key[0] == "warp" and op.warp_settings(kwargs)[0] == "rotate":
            if key in rotations:  # a second rotation: a leaf of its own
                key = None
            rotations.add(key)
        if key is None:
            leaves.append((None, [i]))
        elif key in by_key:
            by_key[key][1].append(i)
        else:
            by_key[key] = (key, [i])
            leaves.append(by_key[key])
    return leaves


def _key(value):
    """A hashable stand-in for a warp setting (a node or an array compares by identity)."""
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return ("id", id(value)) if isinstance(value, DataNode) else value


def _bisect(members: list[int], selected_op_idx, leaf: Callable):
    """``leaf(k)`` for the samples of ``members[k]``: the bisection of
    :func:`split_samples_among_ops` over ``members`` (indices of ops, ascending). Within the
    samples of these members ``selected_op_idx`` takes their values only, so
    ``idx <= members[mid]`` splits them."""

    def split(lo: int, hi: int):
        if lo == hi:
            return leaf(lo)
        mid = (lo + hi) // 2
        return cond(
            selected_op_idx <= members[mid], lambda: split(lo, mid), lambda: split(mid + 1, hi)
        )

    return split(0, len(members) - 1)


def _fused_warp(ops: Sequence, members: list[int], selected_op_idx, args: tuple, kwargs: dict):
    """One warp of the samples of the geometric augmentations ``members`` (all with the same
    fill value and interpolation; at most one rotation): each sample's matrix is the one its
    own augmentation makes (a placeholder for the rotation's), picked on the host. Warps by a
    matrix only: one ``warp_affine``; with the rotation: one ``_warp_fused``, whose angle is
    the rotation's parameter (made for every sample here: one index into its table, no merge)
    and whose kind says which samples rotate."""
    from ...graph import _call_operator

    rotate = [i for i in members if ops[i].warp_settings(kwargs)[0] == "rotate"]
    _, fill, interp = ops[members[0]].warp_settings(kwargs)
    data = _data(args, kwargs)

    def matrix(k: int):
        if members[k] in rotate:
            return types.Constant(np.zeros((2, 3), np.float32), device="cpu")
        return ops[members[k]].warp_matrix(*args, **kwargs)

    matrices = _bisect(members, selected_op_idx, matrix)
    if not rotate:
        return ops[members[0]].op.warp(data, matrices, fill, interp)
    table = np.zeros(len(ops), np.int32)
    table[rotate] = 1
    kw = {
        "matrix": matrices,
        "angle": ops[rotate[0]].warp_param(*args, **kwargs),
        "kind": types.Constant(table)[selected_op_idx],
        "fill_value": fill,
        "interp_type": interp,
    }
    return _call_operator("_warp_fused", (data,), kw)[0]


def _fused_lookup(ops: Sequence, members: list[int], selected_op_idx, args: tuple, kwargs: dict):
    """One lookup of the samples of the value-wise augmentations ``members``: their rows (a
    static table, or a kind of map by statistics and its parameter) one after the other, each
    sample's row (its own augmentation's at its parameter) picked on the host, then one
    ``_lookup_rows`` (static tables only) or one ``_lookup_stats``."""
    from ...graph import _call_operator
    from ...operators.lookup_stats import KINDS

    tables = [_static_table(ops[i], kwargs) for i in members]
    stats = {
        i: _stats_params(ops[i], kwargs) for i, t in zip(members, tables, strict=True) if t is None
    }
    lengths = [
        len(t) if t is not None else len(stats[i]) for i, t in zip(members, tables, strict=True)
    ]
    offsets = np.cumsum([0] + lengths[:-1]).tolist()

    def row(k: int):
        r = ops[members[k]].lookup_row(*_bins(kwargs))
        if isinstance(r, int):
            r = r + offsets[k]
            return r if len(members) == 1 else types.Constant(np.int32(r), device="cpu")
        return r + offsets[k] if offsets[k] else r

    rows = _picked_rows(ops, members, offsets, selected_op_idx, kwargs)
    if rows is None:
        rows = _bisect(members, selected_op_idx, row)
    if not stats:
        table = np.concatenate(tables)
        kw = {"table": table, "row": rows}
        return _call_operator("_lookup_rows", (_data(args, kwargs),), kw)[0]
    kinds, params = [], []
    for k, i in enumerate(members):
        if tables[k] is None:
            kinds.append(np.full(lengths[k], KINDS[ops[i].op.point_kind], np.int32))
            params.append(stats[i])
            tables[k] = np.zeros((lengths[k], 256), np.uint8)
        else:
            kinds.append(np.full(lengths[k], KINDS["table"], np.int32))
            params.append(np.zeros(lengths[k], np.float32))
    kw = {
        "kind": np.concatenate(kinds),
        "param": np.concatenate(params),
        "table": np.concatenate(tables),
        "row": rows,
    }
    return _call_operator("_lookup_stats", (_data(args, kwargs),), kw)[0]


def _picked_rows(ops: Sequence, members: list[int], offsets: list[int], selected_op_idx, kwargs):
    """Each sample's row of the fused table without a conditional: member ``k``'s row is
    ``offsets[k]`` plus its augmentation's ``lookup_row`` (an int, or one of the bin nodes made
    before the select: the bin, the signed bin), so every sample's row is
    ``base[op] + sum over those nodes of has[op] * node``, indexed by the sample's op. A few
    arithmetic nodes instead of ``len(members) - 1`` splits and merges on the CPU stage. None
    where a member would draw its own random sign (a plain bin given to an augmentation that
    negates: drawn inside its branch, as the bisection does)."""
    from ._augmentation import _SignedMagnitudeBin

    if len(members) == 1:  # its row as it is (an int, or its node)
        return None
    magnitude_bin = _bins(kwargs)[0]
    if any(ops[i].randomly_negate for i in members) and not isinstance(
        magnitude_bin, _SignedMagnitudeBin
    ):
        return None
    base = np.zeros(len(ops), np.int32)
    nodes: list = []  # the distinct bin nodes the members' rows add
    has: list[np.ndarray] = []
    for k, i in enumerate(members):
        r = ops[i].lookup_row(*_bins(kwargs))
        base[i] = offsets[k]
        if isinstance(r, int):
            base[i] += r
            continue
        j = next((j for j, node in enumerate(nodes) if node is r), None)
        if j is None:
            nodes.append(r)
            has.append(np.zeros(len(ops), np.int32))
            j = len(nodes) - 1
        has[j][i] = 1
    rows = types.Constant(base)[selected_op_idx]
    for node, mask in zip(nodes, has, strict=True):
        rows = rows + types.Constant(mask)[selected_op_idx] * node
    return rows


def _data(args: tuple, kwargs: dict):
    return args[0] if args else kwargs["data"]


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

    Fewer GPU operators, launches and uploads, the same outputs (BENCHMARKS.md, "Automatic
    augmentation: fused warps and lookup tables"): the standard geometric augmentations
    (shears, translations, the rotation keeping the size) share one warp, each sample with
    the matrix (or angle) of its own augmentation, picked on the host; the value-wise ones
    (posterize, solarize, solarize_add, invert; brightness, contrast, auto_contrast,
    equalize) share one lookup, each sample with the table of its own augmentation at its
    parameter (made from its planes' statistics for the latter four). Any other op is a
    branch of its own.

    Example:
        >>> idx = fn.random.uniform(values=[0, 1], dtype=types.INT32)
        >>> images = select([augmentations.rotate, augmentations.shear_x], idx, images,
        ...                 magnitude_bin=signed_bin(5), num_magnitude_bins=11)
    """
    fusable = isinstance(selected_op_idx, DataNode) and (op_args or "data" in op_kwargs)
    leaves = _groups(ops, op_kwargs) if fusable else []

    def alone(key, members) -> bool:  # a leaf run by its op: not fused, or nothing to fuse
        if key is None or (key[0] == "warp" and len(members) == 1):
            return True
        # one map by statistics: its own op does as much
        return len(members) == 1 and _stats_params(ops[members[0]], op_kwargs) is not None

    if all(alone(key, m) for key, m in leaves):
        # nothing to fuse: one branch per op
        return split_samples_among_ops(0, len(ops) - 1, ops, selected_op_idx, op_args, op_kwargs)
    table = np.zeros(len(ops), np.int32)
    for leaf, (_, members) in enumerate(leaves):
        table[members] = leaf
    leaf_of = types.Constant(table)[selected_op_idx]

    def run_leaf(leaf: tuple):
        key, members = leaf
        if alone(key, members):
            return ops[members[0]](*op_args, **op_kwargs)
        fuse = _fused_warp if key[0] == "warp" else _fused_lookup
        return fuse(ops, members, selected_op_idx, op_args, op_kwargs)

    return _split_leaves(0, len(leaves) - 1, leaves, leaf_of, run_leaf)
