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
