"""The window search of ``fn.random_bbox_crop`` (``RandomBBoxCrop.find_crop_reference``), run
for a whole batch at once.

Each sample keeps its own generator and its own search (:class:`Search`), so its draws and its
result are those of the one-sample search. What is shared is the scoring: a *round* asks every
unfinished sample for its next few options and their candidate windows (drawing more than the
search will use is harmless: the generator belongs to the sample), and one numpy computation
(:func:`score`) gives the metric and the kept boxes of every candidate of every sample, over
the batch's boxes padded to the longest sample. Each sample then walks its candidates in order
as the one-sample search would (:meth:`Search.take`), and finishes or asks for more, twice as
many options each round. The per-candidate numpy calls of the one-sample search were most of
the operator's host time (a few dozen calls of ~1 us on arrays of a few values, per candidate).

Every value is computed with the same float32 operations, element by element, as
``overlap_metrics`` / ``keep_boxes``; padded boxes (zeros, volume 1) never touch a window and
are left out of the minimum or maximum and of the kept boxes.
"""

from __future__ import annotations

import numpy as np

from ._bbox_crop_geometry import remap_boxes, write_boxes

F = np.float32


class Boxes:
    """The boxes of the searched samples, concatenated, with a padded index.

    ``lo``, ``hi``, ``centroid`` are (T + 1, ndim) float32 and ``volume`` (T + 1,): row T is the
    padding box. ``rows`` is (S, B) int: sample s's boxes are rows ``rows[s, :count[s]]``, the
    rest is T. ``starts[s]`` is its first row.
    """

    def __init__(self, lo: np.ndarray, hi: np.ndarray, counts: list[int], volume) -> None:
        total, ndim = lo.shape
        self.counts = counts
        self.starts = np.zeros(len(counts), np.intp)
        np.cumsum(counts[:-1], out=self.starts[1:])
        pad = np.zeros((1, ndim), F)
        self.lo = np.concatenate([lo, pad])
        self.hi = np.concatenate([hi, pad])
        self.volume = np.concatenate([volume, np.ones(1, F)])
        self.centroid = ((self.lo + self.hi) * F(0.5)).astype(F)
        width = max(counts)
        cols = np.arange(width)
        self.rows = np.where(
            cols < np.asarray(counts)[:, None], self.starts[:, None] + cols, total
        ).astype(np.intp)
        self.pad_row = total


class Search:
    """One sample's search: the loop variables of ``find_crop_reference``, advanced a round at a
    time (:meth:`propose` then :meth:`take`) until ``done``. Then ``no_crop`` (the "no crop"
    option was drawn), or ``result`` (the (candidate, kept-box mask) chosen, None when every
    candidate had a bad aspect ratio) with ``success`` (False: the best one, with a warning)."""

    __slots__ = (
        "rng",
        "crop_shape",
        "input_shape",
        "count",
        "best",
        "result",
        "success",
        "planned",
        "options",
        "plan",
        "done",
        "no_crop",
    )

    def __init__(self, rng, crop_shape, input_shape, first_round: int) -> None:
        self.rng = rng
        self.crop_shape = crop_shape
        self.input_shape = input_shape
        self.count = 0
        self.best = -1.0
        self.result = None
        self.success = False
        self.planned = 0
        self.options = first_round
        self.plan: list = []
        self.done = False
        self.no_crop = False

    def propose(self, op, ndim: int) -> list:
        """Draw this round's options and candidates; the candidates to score (in order)."""
        self.plan, self.planned = op._plan(
            self.rng, ndim, self.crop_shape, self.input_shape, self.options, self.planned
        )
        self.options *= 2
        if not self.plan:  # total_num_attempts reached
            self.done = True
            return []
        return [c for step in self.plan if step is not None for c in step[1] if c is not None]

    def take(self, total_num_attempts: int, metrics: list, keep, kept_any: list) -> None:
        """Walk this round's candidates in order, given their scores (``keep`` rows: the kept
        boxes of each candidate)."""
        j = 0
        for step in self.plan:
            if self.success or 0 <= total_num_attempts <= self.count:
                self.done = True
                return
            if step is None:  # no crop: the whole image, every box
                self.no_crop = self.done = True
                return
            threshold, cands = step
            for cand in cands:
                self.count += 1
                if cand is None:
                    continue
                metric = metrics[j]
                valid = metric >= threshold
                if metric <= self.best and not valid:
                    j += 1
                    continue
                self.best = metric
                self.result = (cand, keep[j])
                self.success = valid and kept_any[j]
                j += 1
        if self.success or 0 <= total_num_attempts <= self.count:
            self.done = True


def score(op, boxes: Boxes, samples, clo: np.ndarray, chi: np.ndarray):
    """(metric of each window (K,) float32, its kept-box mask (K, B), whether it keeps any box
    (K,)) for the relative windows ``clo``/``chi`` (K, ndim) float32, window k one of sample
    ``samples[k]``."""
    clo, chi = clo[:, None, :], chi[:, None, :]  # (K, 1, ndim)
    rows = boxes.rows[samples]  # (K, B)
    lo, hi, box_vol = boxes.lo[rows], boxes.hi[rows], boxes.volume[rows]
    ext = np.subtract(np.minimum(hi, chi), np.maximum(lo, clo), dtype=F)  # (K, B, ndim)
    disjoint = (ext <= 0).any(axis=2)
    inter = ext[..., 0] * ext[..., 1]
    for d in range(2, ext.shape[-1]):
        inter *= ext[..., d]
    inter[disjoint] = 0
    with np.errstate(divide="ignore", invalid="ignore"):
        if op.metric == "overlap":
            ious = np.divide(inter, box_vol, dtype=F)
        else:
            crop_ext = np.subtract(chi, clo, dtype=F)  # (K, 1, ndim)
            crop_vol = crop_ext[..., 0] * crop_ext[..., 1]
            for d in range(2, crop_ext.shape[-1]):
                crop_vol *= crop_ext[..., d]
            ious = np.divide(inter, (crop_vol + box_vol) - inter, dtype=F)
            ious[inter == 0] = 0
        pad = rows == boxes.pad_row
        if op.all_boxes:
            metrics = np.where(pad, F(np.inf), ious).min(axis=1)
        else:
            metrics = np.where(pad, F(-np.inf), ious).max(axis=1)
        if op.prune is None:
            cen = boxes.centroid[rows]
            keep = ((cen >= clo) & (cen < chi)).all(axis=2)
        else:
            share = ious if op.metric == "overlap" else np.divide(inter, box_vol, dtype=F)
            keep = ~disjoint & (share >= F(op.prune))
    keep &= ~pad
    return metrics, keep, keep.any(axis=1)


def score_candidates(op, boxes: Boxes, samples: list[int], cands: list):
    """:func:`score` of candidates (rel lo, rel hi, ...), as lists (metrics, kept any)."""
    clo = np.array([c[0] for c in cands], F)
    chi = np.array([c[1] for c in cands], F)
    metrics, keep, kept_any = score(op, boxes, samples, clo, chi)
    return metrics.tolist(), keep, kept_any.tolist()


def search_all(op, boxes: Boxes, searches: list, ndim: int, active: list[int]) -> None:
    """Run the searches ``active`` (indices of ``searches``, samples of ``boxes``) to their end,
    scoring each round's candidates of all of them at once."""
    while active:
        samples: list[int] = []
        cands: list = []
        spans = []
        for s in active:
            proposed = searches[s].propose(op, ndim)
            spans.append((s, len(cands), len(proposed)))
            samples += [s] * len(proposed)
            cands += proposed
        metrics, keep, kept_any = (
            score_candidates(op, boxes, samples, cands) if cands else ([], None, [])
        )
        still = []
        for s, start, k in spans:
            st = searches[s]
            if not st.done:
                end = start + k
                st.take(
                    op.total_num_attempts,
                    metrics[start:end],
                    keep[start:end] if k else None,
                    kept_any[start:end],
                )
            if not st.done:
                still.append(s)
        active = still


class Outcomes:
    """The batch's windows and kept boxes as they are found, turned into the outputs at once.

    ``anchors``/``ends`` (n, ndim): the output windows; ``wlo``/``whi``: the relative windows
    the kept boxes are mapped into where ``remap``; ``mask`` (n, B): each sample's kept boxes
    (columns are its box indices). A sample whose window is the whole image keeps every box
    as it is (not remapped)."""

    def __init__(self, n: int, ndim: int, width: int) -> None:
        self.anchors = np.zeros((n, ndim), F)
        self.ends = np.ones((n, ndim), F)
        self.wlo = np.zeros((n, ndim), F)
        self.whi = np.ones((n, ndim), F)
        self.remap = np.zeros(n, bool)
        self.mask = np.zeros((n, width), bool)

    def take_lockstep(self, samples: np.ndarray, found, counts: list[int], shapes) -> None:
        crop = found.done & ~found.no_crop & found.has_result
        s = samples[crop]
        self.anchors[s], self.ends[s] = found.out_lo[crop], found.out_hi[crop]
        self.wlo[s], self.whi[s] = found.lo[crop], found.hi[crop]
        self.remap[s] = True
        self.mask[s] = found.keep[crop][:, : self.mask.shape[1]]
        whole = samples[found.done & ~crop].tolist()  # every box, unchanged
        self.mask[whole] = np.arange(self.mask.shape[1]) < np.asarray(counts)[whole, None]
        for i in whole:
            if shapes[i][0] is not None:  # a fixed window: the image size in pixels
                self.ends[i] = shapes[i][1].astype(F)

    def take_search(self, s, rel_lo, rel_hi, out_lo, out_hi, kept, count: int) -> None:
        self.anchors[s], self.ends[s] = out_lo, out_hi
        if kept is None:  # the whole image: every box, unchanged
            self.mask[s, :count] = True
            return
        self.wlo[s], self.whi[s] = rel_lo, rel_hi
        self.remap[s] = True
        self.mask[s, kept] = True

    def outputs(self, op, lo, hi, counts, labels_in, layout) -> list:
        """The operator's outputs: anchors and shapes (n, ndim), then per sample the kept boxes
        in the window (:func:`remap_boxes` of them all at once), labels and indices."""
        ends = np.cumsum(np.count_nonzero(self.mask, axis=1)).tolist()
        cuts = list(zip([0, *ends[:-1]], ends, strict=True))
        sample, col = np.nonzero(self.mask)
        starts = np.zeros(len(counts), np.intp)
        np.cumsum(counts[:-1], out=starts[1:])
        rows = starts[sample] + col
        new_lo, new_hi = remap_boxes(self.wlo[sample], self.whi[sample], lo[rows], hi[rows])
        same = ~self.remap[sample]
        if same.any():
            new_lo[same], new_hi[same] = lo[rows[same]], hi[rows[same]]
        outs = [
            self.anchors,
            (self.ends - self.anchors).astype(F),
            _split(write_boxes(new_lo, new_hi, layout), cuts),
        ]
        if op.has_labels:
            outs.append(_gather_labels(labels_in, rows, col, cuts))
        if op.output_bbox_indices:
            outs.append(_split(col.astype(np.int32), cuts))
        return outs


def _split(a: np.ndarray, cuts: list[tuple[int, int]]) -> list[np.ndarray]:
    """The rows [start, end) of ``a`` for each cut (``np.split`` without its per-piece cost)."""
    return [a[s:e] for s, e in cuts]


def _gather_labels(labels: list, rows: np.ndarray, col: np.ndarray, cuts) -> list[np.ndarray]:
    """Each sample's labels of its kept boxes: from all labels concatenated where they share a
    dtype and a row shape (``rows``: global box indices), else sample by sample (``col``)."""
    labels = [np.asarray(x) for x in labels]
    kinds = {(x.dtype, x.shape[1:]) for x in labels if x.ndim >= 1}
    if len(kinds) == 1 and all(x.ndim >= 1 for x in labels):
        return _split(np.concatenate(labels)[rows], cuts)
    return [x[c] for x, c in zip(labels, _split(col, cuts), strict=True)]
