"""Conditionals in the GPU stage: which samples each operator runs on, and how the values of
the branches are held and merged, with a few numpy calls per operator and none per sample.

The GPU value of a node in a branch (``OpNode.scope``) is held *compact*: it has one sample per
sample of the batch that took the branch, in batch order, and nothing for the others (a
branch that no sample took holds :data:`~dlpipe._conditionals.ABSENT`). A node outside every
branch (and every CPU node: the CPU stage keeps whole batches, ``None`` where a sample took
another branch) holds the whole batch. So:

* an operator of scope ``S`` reads a value held in ``S`` as it is; a value held in an enclosing
  scope (or a whole batch) through one ``take`` of the positions of ``S``'s samples within it
  (:meth:`BranchPlan.positions`, computed once per pair of scopes and iteration);
* its outputs are held in ``S`` as they come out: nothing is scattered back;
* a ``_conditional_merge`` of scope ``P`` takes its true input at the positions of the samples
  of ``P`` whose predicate holds, its false input at the others, and interleaves the two
  (:func:`merge_gpu`: one scatter of pointers, shapes and strides, no copy).

The per-sample masks and positions come from the predicates' values, once per scope and
iteration (:class:`BranchPlan`). A pipeline output made inside a branch is given back as a whole
batch (:meth:`BranchPlan.whole`, empty samples where another branch was taken). The invariant
the plan keeps: ``len(value) == number of samples of held_in(node)`` for every GPU value that is
not ABSENT.

Values are duck-typed: anything with ``take(positions)``, ``of_arrays(...)``, ``ptrs`` /
``shapes`` / ``strides`` arrays, ``dtype``, ``owners`` and ``device_id``
(``tensors_gpu.SampleList``), so the tests exercise the plan on the CPU with host stand-ins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter

import numpy as np

from ._conditionals import Absent, Scope, predicate_mask

__all__ = ["BranchPlan", "held_in", "merge_gpu", "node_holders", "scatter_gpu"]


def held_in(dn) -> Scope | None:
    """The scope whose samples the GPU stage holds of ``dn``'s value (None: the whole batch):
    the producing node's scope for a GPU or mixed node, None for a CPU node's list."""
    src = dn.source
    if src is None or src.device == "cpu":
        return None
    return src.scope


def node_holders(node) -> tuple[tuple, dict]:
    """(:func:`held_in` of each of ``node``'s input nodes, {argument name: :func:`held_in` of
    its node}): fixed by the graph, so the GPU stage works them out once per node."""
    return (
        tuple(held_in(x) for x in node.inputs),
        {k: held_in(x) for k, x in node.arg_nodes.items()},
    )


def _pick(seq, pos: np.ndarray) -> list:
    """``[seq[j] for j in pos]`` (a CPU value's or the parameters' samples over a scope), with
    one ``itemgetter`` call instead of a Python step per sample."""
    idx = pos.tolist()
    if len(idx) > 1:
        return list(itemgetter(*idx)(seq))
    return [seq[j] for j in idx]


def _positions(mask: np.ndarray) -> np.ndarray | None:
    """The positions where a 1-D bool mask holds (``mask.nonzero()[0]``, half the cost of
    ``np.flatnonzero``), None when it holds everywhere: one numpy call per scope and batch."""
    pos = mask.nonzero()[0]
    return None if len(pos) == len(mask) else pos


def _batch_owner(owners):
    """An owner for every sample of a batch whose samples come from ``owners`` (one object, or
    a list with one per sample): one reference instead of a per-sample list (a tuple is never
    read per sample)."""
    return (owners,) if isinstance(owners, list) else owners


class BranchPlan:
    """The conditional bookkeeping of one GPU-stage iteration (see the module docstring).

    Args:
        values: the iteration's values (``Workspace.values``): the predicates are read there.
        n: the batch size.
    """

    def __init__(self, values: dict, n: int):
        self.values = values
        self.n = n
        self._preds: dict = {}  # predicate DataNode -> bool (n,)
        self._masks: dict = {}  # scope -> bool (n,)
        self._rows: dict = {None: None}  # scope -> int64 positions (None: every sample)
        self._within: dict = {}  # (scope, holder) -> positions in the holder's value, or None

    # --- masks and positions ------------------------------------------------------------------
    def predicate(self, node) -> np.ndarray:
        """A predicate node's values as a bool (n,) array (False where it has none)."""
        m = self._preds.get(node)
        if m is None:
            m = self._preds[node] = predicate_mask(self.values[node], self.n)
        return m

    def mask(self, scope: Scope | None) -> np.ndarray | None:
        """Which samples run in ``scope``: a bool (n,) array; None for the whole batch."""
        if scope is None:
            return None
        m = self._masks.get(scope)
        if m is None:
            p = self.predicate(scope.predicate)
            m = p if scope.branch else ~p
            parent = self.mask(scope.parent)
            if parent is not None:
                m = m & parent
            self._masks[scope] = m
        return m

    def rows(self, scope: Scope | None) -> np.ndarray | None:
        """The batch positions of ``scope``'s samples (int64, ascending); None when that is
        every sample of the batch."""
        try:
            return self._rows[scope]
        except KeyError:
            pass
        m = self.mask(scope)
        r = _positions(m)
        self._rows[scope] = r
        return r

    def count(self, scope: Scope | None) -> int:
        r = self.rows(scope)
        return self.n if r is None else len(r)

    def _select(self, mask: np.ndarray | None, holder: Scope | None) -> np.ndarray | None:
        """Positions, within a value held in ``holder``, of the samples ``mask`` selects (None:
        all of the value's samples).

        Raises:
            RuntimeError: ``mask`` selects a sample the holder does not have (an engine bug:
                the graph only lets an operator read its own scope's and enclosing scopes'
                values).
        """
        rh = self.rows(holder)
        if rh is None:
            return None if mask is None else _positions(mask)
        if mask is None:
            raise RuntimeError(
                f"conditionals: the whole batch read from a value of {len(rh)} of its {self.n} "
                "samples"
            )
        pos = mask[rh].nonzero()[0]
        wanted = int(np.count_nonzero(mask))
        if len(pos) != wanted:
            raise RuntimeError(
                f"conditionals: {wanted} sample(s) read from a value that has {len(pos)} of them"
            )
        return None if len(pos) == len(rh) else pos

    def positions(self, scope: Scope | None, holder: Scope | None) -> np.ndarray | None:
        """Positions of ``scope``'s samples within a value held in ``holder`` (an enclosing
        scope, or None for a whole batch); None when they are all of its samples."""
        if scope is holder:
            return None
        key = (scope, holder)
        try:
            return self._within[key]
        except KeyError:
            pass
        pos = self._within[key] = self._select(self.mask(scope), holder)
        return pos

    # --- an operator's samples ----------------------------------------------------------------
    def samples(self, node, inputs: Sequence) -> np.ndarray | None:
        """The batch positions ``node`` runs on: None for the whole batch, an empty array for
        none (its outputs are then ABSENT), else the positions (ascending).

        A ``_conditional_merge`` (``reads_child_scopes``) runs on its scope's samples even
        when one of its inputs is ABSENT (no sample of its scope took that branch: they all
        come from the other one). Any other operator reads values of its own scope or of
        enclosing ones, present wherever its scope has samples.

        Raises:
            RuntimeError: an operator other than a merge got an ABSENT input while samples
                took its branch (the graph checks at build time make this an engine bug).
        """
        rows = self.rows(node.scope)
        if rows is not None and not len(rows):
            return rows
        if not getattr(node.op, "reads_child_scopes", False):
            for x, v in zip(node.inputs, inputs, strict=True):
                if isinstance(v, Absent):
                    raise RuntimeError(
                        f"{node.name}: its input {x.name!r} has no samples though "
                        f"{self.n if rows is None else len(rows)} sample(s) took the "
                        "operator's branch"
                    )
        return rows

    def bring(self, x, value, scope: Scope | None):
        """The value of node ``x`` over ``scope``'s samples (a GPU value held in ``scope`` or
        in an enclosing one, or a CPU list of the whole batch)."""
        if value is None or isinstance(value, Absent):
            return value
        return self._bring(value, held_in(x), scope)

    def _bring(self, value, holder: Scope | None, scope: Scope | None):
        """:meth:`bring` of a value held in ``holder`` (``held_in`` of its node)."""
        if holder is scope or value is None or isinstance(value, Absent):
            return value
        pos = self.positions(scope, holder)
        if pos is None:
            return value
        if isinstance(value, list):
            return _pick(value, pos)
        return value.take(pos)

    def gather(self, node, inputs: Sequence, args: dict, params, rows: np.ndarray | None, holders):
        """``node``'s inputs, argument inputs and parameters over its samples (``rows``, from
        :meth:`samples`): one ``take`` per GPU input held in another scope, none per sample.
        ``holders``: (``held_in`` of each input node, {argument name: ``held_in`` of its
        node}), the same every iteration (:func:`node_holders`, worked out once per node).

        A merge's two inputs are taken over the samples of its scope that chose the true
        branch and those that chose the false one (ABSENT stays ABSENT); its ``predicate``
        argument comes as a bool array over its samples.

        Raises:
            RuntimeError: a merge sample chose a branch that is ABSENT.
        """
        scope = node.scope
        if getattr(node.op, "reads_child_scopes", False):
            pred_node = node.arg_nodes["predicate"]
            pred = self.predicate(pred_node)
            sides = None  # (the samples of each side: made only when an input needs them)
            taken = []
            in_held, arg_held = holders
            for held, v, branch in zip(in_held, inputs, (True, False), strict=True):
                absent = isinstance(v, Absent)
                holder = None if absent else held
                if (
                    holder is not None
                    and holder.parent is scope
                    and holder.predicate is pred_node
                    and holder.branch is branch
                ):  # held in that very branch: exactly the samples wanted
                    taken.append(v)
                    continue
                if sides is None:
                    within = self.mask(scope)
                    sides = (pred, ~pred) if within is None else (pred & within, ~pred & within)
                side = sides[0] if branch else sides[1]
                if absent:
                    if side.any():
                        raise RuntimeError(
                            f"{node.name}: a sample chose a branch that produced no samples"
                        )
                    taken.append(v)
                    continue
                pos = self._select(side, holder)
                taken.append(v if pos is None else v.take(pos))
            inputs = taken
            # its own predicate over its samples: the bool array already made
            bring = self._bring
            args = {k: bring(v, arg_held[k], scope) for k, v in args.items() if k != "predicate"}
            args["predicate"] = pred if rows is None else pred[rows]
        else:
            in_held, arg_held = holders
            bring = self._bring
            inputs = [bring(v, h, scope) for v, h in zip(inputs, in_held, strict=True)]
            args = {k: bring(v, arg_held[k], scope) for k, v in args.items()}
        if rows is not None and params is not None:  # per-sample parameters, drawn per batch
            params = params[rows] if isinstance(params, np.ndarray) else _pick(params, rows)
        return inputs, args, params

    # --- whole batches ------------------------------------------------------------------------
    def whole(self, dn, value):
        """``dn``'s GPU value as a whole batch (a pipeline output made inside a branch): its
        samples at their batch positions, empty samples elsewhere."""
        holder = held_in(dn)
        if holder is None or isinstance(value, Absent):
            return value
        rows = self.rows(holder)
        return value if rows is None else scatter_gpu(value, rows, self.n)

    def replace_skipped(self, ws, skipped: dict, replace: Callable) -> BranchPlan:
        """Replace skipped samples (``on_error="skip"``) with ``replace(ws, skipped)``
        (``executor.replace_skipped``, which works on whole batches): values held in a branch
        are made whole first and compact again after, over the new predicates' samples.

        Returns:
            The plan of the workspace's new values.
        """
        compact = {}
        for dn, v in ws.values.items():
            if not isinstance(v, list | Absent) and held_in(dn) is not None:
                compact[dn] = held_in(dn)
                ws.values[dn] = self.whole(dn, v)
        replace(ws, skipped)
        plan = BranchPlan(ws.values, ws.batch_size)
        for dn, holder in compact.items():
            rows = plan.rows(holder)
            if rows is not None:
                ws.values[dn] = ws.values[dn].take(rows)
        return plan


def scatter_gpu(out, idx, n: int):
    """A whole-batch SampleList holding ``out``'s samples at batch positions ``idx`` (empty
    placeholders elsewhere: null pointers, zero shapes)."""
    if not hasattr(out, "ptrs"):  # a CuPy array or a list of them
        from .tensors_gpu import SampleList

        out = SampleList.coerce(out)
    ix = np.asarray(idx, np.int64)
    ndim = out.shapes.shape[1]
    ptrs = np.zeros(n, np.uint64)
    shapes = np.zeros((n, ndim), np.int64)
    strides = np.zeros((n, ndim), np.int64)
    ptrs[ix], shapes[ix], strides[ix] = out.ptrs, out.shapes, out.strides
    return type(out).of_arrays(
        out.dtype, ptrs, shapes, strides, _batch_owner(out.owners), out.device_id
    )


def merge_gpu(t, f, pred: np.ndarray):
    """Interleave two branches' samples: where ``pred`` holds the next sample of ``t``, else
    the next of ``f`` (``t`` has one sample per true entry of ``pred``, ``f`` one per false
    entry); pointers, shapes and strides, no copy. A branch that no entry chose may be ABSENT
    (and is returned as it is when every entry chose it, whatever its length).

    Raises:
        RuntimeError: an entry chose an ABSENT branch, or a branch's length is not its count.
        TypeError: the branches' dtypes or numbers of dimensions differ.
    """
    pred = np.asarray(pred, bool)
    n = len(pred)
    nt = int(np.count_nonzero(pred))
    if (isinstance(t, Absent) and nt) or (isinstance(f, Absent) and nt < n):
        raise RuntimeError("conditional merge: a sample chose a branch that produced no samples")
    if nt == n and not isinstance(t, Absent):
        return t
    if nt == 0:
        return f
    if len(t) != nt or len(f) != n - nt:
        raise RuntimeError(
            f"conditional merge: {nt} and {n - nt} samples chose the branches, which hold "
            f"{len(t)} and {len(f)}"
        )
    if t.dtype != f.dtype or t.shapes.shape[1] != f.shapes.shape[1]:
        raise TypeError(f"the `if` branches give {t.dtype} and {f.dtype} data")
    ndim = t.shapes.shape[1]
    ti, fi = pred.nonzero()[0], (~pred).nonzero()[0]  # (index arrays: one nonzero each)
    ptrs = np.empty(n, np.uint64)
    shapes = np.empty((n, ndim), np.int64)
    strides = np.empty((n, ndim), np.int64)
    ptrs[ti], ptrs[fi] = t.ptrs, f.ptrs
    shapes[ti], shapes[fi] = t.shapes, f.shapes
    strides[ti], strides[fi] = t.strides, f.strides
    owners = (_batch_owner(t.owners), _batch_owner(f.owners))
    out = type(t).of_arrays(t.dtype, ptrs, shapes, strides, owners, t.device_id)
    row = getattr(t, "_row", None)  # (kernels._batch.uniform_row: one layout both sides)
    if row is not None and row == getattr(f, "_row", None):
        out._row = row
    return out
