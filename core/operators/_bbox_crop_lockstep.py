"""``random_bbox_crop``'s window search for every sample of a batch in lockstep, on numpy arrays.

The search of one sample (``RandomBBoxCrop.find_crop_reference``) is a loop of a few numpy
calls on arrays of two values per random draw; even scored in batches
(``_bbox_crop_search.py``), drawing the candidates one Python call at a time was most of the
operator's host time. Here every sample takes its *n*-th option at the same step: one step
draws the option and its candidates of all the unfinished samples, scores them and updates each
sample's best window, in about a hundred numpy calls whatever the batch size. SSD's crop takes
3.4 options a sample on average, 16 for the slowest of a batch of 128: lockstep stops when only
a sixteenth of the samples are left, and those go on one at a time (``_bbox_crop_search.py``),
their generators advanced to where lockstep left them (a step costs as much for 3 samples as
for 128).

The draws are the generator's: each sample's generator gives its raw 64-bit stream
(``random_raw``), read the way numpy's ``Generator`` reads it for the calls the search makes:

* ``random()``: ``(raw >> 11) * 2**-53``, one raw value; ``uniform(0, h)`` is ``0.0 + h * that``;
* ``integers(m)`` (m > 1): a 32-bit value, the low half of a new raw value or the high half kept
  from the previous such draw (PCG64's ``next_uint32`` buffer; ``random()`` does not touch it),
  mapped by Lemire's method: ``(u * m) >> 32``, unless ``(u * m) & 0xFFFFFFFF`` falls under
  ``2**32 % m``, where numpy draws again (odds ~m / 2**32: that sample's search is done again
  the ordinary way);
* ``integers(1)`` draws nothing.

So the windows, the boxes kept and the warnings are those of the one-sample search (the tests
compare them, seed for seed). ``permutation(ndim)`` (the order in which aspect ratios of one
value tie the extents) is read as numpy's Fisher-Yates shuffle (see :func:`_tie`). A sample
whose search needs a draw not read here (a rejected ``integers`` draw, an ``integers`` range
over 32 bits, a window larger than the image) is searched again from its first draw by
``_bbox_crop_search.py``.
"""

from __future__ import annotations

import numpy as np

from ._bbox_crop_search import Boxes, Search, score

F = np.float32
_MASK32 = np.uint64(0xFFFFFFFF)
_TO_DOUBLE = 1.0 / 9007199254740992.0  # 2**-53
_BLOCK = 32  # raw values drawn per sample at a time
_HANDOFF = 16  # lockstep ends when no more than 1 / _HANDOFF of the samples are left


class _Streams:
    """The raw streams of the samples' generators, drawn ``_BLOCK`` values at a time, kept as
    ``random()`` doubles and as the two 32-bit halves ``integers`` reads."""

    def __init__(self, gens: list) -> None:
        self.gens = gens
        self.size = 0
        self.dbl = self.low = self.high = np.zeros((len(gens), 0))
        self.ensure(_BLOCK, np.ones(len(gens), bool))

    def ensure(self, end: int, live: np.ndarray) -> None:
        """Make positions below ``end`` readable (the ``live`` samples' with their draws)."""
        if end <= self.size:
            return
        grow = _BLOCK * -(-(end - self.size) // _BLOCK)
        raw = np.zeros((len(self.gens), grow), np.uint64)
        for s in np.flatnonzero(live).tolist():
            raw[s] = self.gens[s].bit_generator.random_raw(grow)
        dbl = (raw >> np.uint64(11)) * _TO_DOUBLE
        self.dbl = np.concatenate([self.dbl, dbl], axis=1)
        self.low = np.concatenate([self.low, raw & _MASK32], axis=1).astype(np.uint64)
        self.high = np.concatenate([self.high, raw >> np.uint64(32)], axis=1).astype(np.uint64)
        self.size += grow


class Found:
    """What :func:`lockstep` found, per sample of its ``samples`` (arrays in that order):
    ``done`` (its search ended here), ``no_crop``, ``success``, ``count``, ``best`` (float32),
    ``has_result`` and the chosen window ``lo``/``hi`` (n, ndim) float32 with its kept-box mask
    ``keep`` (n, B); ``rest``: (position, :class:`Search` or None) of the samples it did not
    end. An unfinished Search continues where lockstep stopped (its generator advanced to
    there: a step costs as much for 3 samples as for 128, the last few go on one at a time);
    None means the sample's search must start again from its first draw (a rejected
    ``integers`` draw, or a window larger than the image)."""

    __slots__ = ("done", "no_crop", "success", "count", "best", "has_result", "lo", "hi")
    __slots__ += ("out_lo", "out_hi", "keep", "rest")


class _Draws:
    """The samples' positions in their streams and PCG64's 32-bit buffer, with the draws the
    search makes, for the ``live`` samples (the others keep their places). The streams grow
    as reads need them, with draws for the ``active`` samples (the others cannot read there)."""

    def __init__(self, streams: _Streams, n: int) -> None:
        self.streams = streams
        self.rows = np.arange(n)
        self.pos = np.zeros(n, np.int64)
        self.has32 = np.zeros(n, bool)
        self.buf32 = np.zeros(n, np.uint64)
        self.active = np.ones(n, bool)  # the samples that may draw (in this step)

    def doubles(self, live: np.ndarray, k: int) -> np.ndarray:
        """(n, k) ``random()`` values: k draws of each live sample."""
        pos = self.pos
        self.streams.ensure(int(pos.max()) + k, self.active)
        out = self.streams.dbl[self.rows[:, None], pos[:, None] + np.arange(k)]
        self.pos = pos + live * k
        return out

    def uint32(self, live: np.ndarray) -> np.ndarray:
        """(n,) uint64: one ``next_uint32`` of each live sample."""
        has32, pos = self.has32, self.pos
        self.streams.ensure(int(pos.max()) + 1, self.active)
        u32 = np.where(has32, self.buf32, self.streams.low[self.rows, pos])
        self.buf32 = np.where(has32, self.buf32, self.streams.high[self.rows, pos])
        self.pos = pos + (live & ~has32)
        self.has32 = has32 ^ live
        return u32

    def bounded(self, live: np.ndarray, excl: np.ndarray, reject_below: np.ndarray):
        """(value, rejected): ``integers`` over ``excl`` (uint64, 2 .. 2**32 - 1) values by
        Lemire's method, for the live samples with ``excl > 1`` (the others draw nothing);
        rejected where numpy would draw again."""
        draw = live & (excl > 1)
        m = self.uint32(draw) * excl
        return m >> np.uint64(32), draw & ((m & _MASK32) < reject_below)


def _reject_below(excl: np.ndarray) -> np.ndarray:
    """Lemire's threshold for ``excl`` values: ``2**32 % excl`` (uint64)."""
    excl = np.maximum(excl, np.uint64(1))
    return (np.uint64(2**32) - excl) % excl


def lockstep(
    op, boxes: Boxes, gens: list, samples: list[int], ndim: int, params: list, shapes=None
) -> Found:
    """The searches of ``samples`` (indices of ``gens``, ``params`` (their seeds), of
    ``shapes`` ((crop_shape, input_shape) in canonical order, None each where not given) and
    of the samples of ``boxes``), in lockstep; see :class:`Found`."""
    n = len(samples)
    pixels_of = crop = None
    if op.input_shape_given:
        pixels_of = np.array([shapes[s][1] for s in samples], np.int64).astype(F)
    if op.fixed_crop:
        crop = np.array([shapes[s][0] for s in samples], np.int64)
        span = np.array([shapes[s][1] for s in samples], np.int64) - crop
        span_lo = np.minimum(span, 0)
        span_excl = (np.abs(span) + 1).astype(np.uint64)
        span_reject = _reject_below(span_excl)
        crop_f = crop.astype(F)
        crop_rel = crop_f / pixels_of
    idx = np.asarray(samples, np.intp)
    streams = _Streams([gens[s] for s in samples])
    draws = _Draws(streams, n)
    num_opts = len(op.options)
    opt_no_crop = np.array([nc for nc, _ in op.options], bool)
    opt_thr = np.array([t for _, t in op.options], F)
    opt_excl = np.full(n, num_opts, np.uint64)
    opt_reject = _reject_below(opt_excl)
    lo_s, hi_s = float(op.scaling[0]), float(op.scaling[1])
    pairs = [(i, j) for i in range(ndim) for j in range(i + 1, ndim)]
    ranges = [op.ar_ranges[k % len(op.ar_ranges)] for k in range(len(pairs))]
    tied = None  # ratios of the extents a range of one value ties (_fix_aspect_ratios)
    if any(r_lo == r_hi for r_lo, r_hi in ranges):
        tied = np.zeros((ndim, ndim), F)
        for (d0, d1), (r_lo, r_hi) in zip(pairs, ranges, strict=True):
            if r_lo == r_hi:
                tied[d0, d1] = r_lo
                tied[d1, d0] = F(1.0 / float(r_lo)) if r_lo else F(np.inf)
    total = op.total_num_attempts
    few = max(2, n // _HANDOFF)  # this many unfinished samples or fewer: the ordinary search

    count = np.zeros(n, np.int64)
    best = np.full(n, -1.0, F)
    success = np.zeros(n, bool)
    done = np.zeros(n, bool)
    no_crop = np.zeros(n, bool)
    redo = np.zeros(n, bool)
    if crop is not None:  # integers() over more than 32 bits: numpy's 64-bit path
        redo |= (span_excl > np.uint64(0xFFFFFFFF)).any(axis=1)
    has_result = np.zeros(n, bool)
    res = [np.zeros((n, ndim), F) for _ in range(4)]  # relative lo, hi; output lo, hi
    res_keep = np.zeros((n, boxes.rows.shape[1]), bool)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        while True:
            live = ~(done | redo)
            if total >= 0:
                done |= live & (count >= total)
                live &= count < total
            if np.count_nonzero(live) <= few:
                break
            draws.active = live.copy()
            choice, rejected = draws.bounded(live, opt_excl, opt_reject)
            if rejected.any():
                redo |= rejected
                live &= ~rejected
            choice = choice.astype(np.intp)
            stop = live & opt_no_crop[choice]
            if stop.any():
                no_crop |= stop
                done |= stop
                live &= ~stop
            threshold = opt_thr[choice]
            for _ in range(op.num_attempts):
                count += live
                if crop is None:
                    cand, window = _relative(
                        draws, live, ndim, lo_s, hi_s, pairs, ranges, pixels_of, tied
                    )
                    big = cand & (window[0] < 0).any(axis=1)  # uniform(0, high < 0) raises
                else:
                    anchor = np.empty((n, ndim), F)
                    big = np.zeros(n, bool)
                    for d in range(ndim):
                        v, rej = draws.bounded(live, span_excl[:, d], span_reject[:, d])
                        anchor[:, d] = (v.astype(np.int64) + span_lo[:, d]).astype(F)
                        big |= rej
                    cand = live
                    rel_lo = anchor / pixels_of
                    window = (rel_lo, rel_lo + crop_rel, anchor, anchor + crop_f)
                if big.any():
                    redo |= big
                    live &= ~big
                    cand = cand & ~big
                sel = np.flatnonzero(cand)
                if not len(sel):
                    continue
                if crop is None:  # the anchor, drawn where the shape is valid
                    high, shape, u = window
                    lo = (0.0 + high[sel].astype(np.float64) * u[sel]).astype(F)
                    window = (lo, lo + shape[sel], lo, lo + shape[sel])
                else:
                    window = tuple(w[sel] for w in window)
                metric, keep, kept_any = score(op, boxes, idx[sel], window[0], window[1])
                valid = metric >= threshold[sel]
                better = ~((metric <= best[sel]) & ~valid)
                upd = sel[better]
                best[upd] = metric[better]
                for r, w in zip(res, window, strict=True):
                    r[upd] = w[better]
                res_keep[upd] = keep[better]
                has_result[upd] = True
                success[upd] = (valid & kept_any)[better]
            done |= live & success
    found = Found()
    found.done, found.no_crop, found.success = done, no_crop, success
    found.count, found.best, found.has_result = count, best, has_result
    found.lo, found.hi, found.out_lo, found.out_hi = res
    found.keep = res_keep
    found.rest = []
    for k in np.flatnonzero(~done).tolist():
        if redo[k]:
            found.rest.append((k, None))
            continue
        st = Search(None, *(shapes[samples[k]] if shapes else (None, None)), 1)
        st.success, st.count, st.best = bool(success[k]), int(count[k]), float(best[k])
        st.planned = st.count
        if has_result[k]:
            st.result = (tuple(r[k] for r in res), res_keep[k])
        # the generator as it would be after these draws
        st.rng = np.random.default_rng(params[samples[k]])
        bg = st.rng.bit_generator
        bg.advance(int(draws.pos[k]))
        state = bg.state
        state["has_uint32"], state["uinteger"] = int(draws.has32[k]), int(draws.buf32[k])
        bg.state = state
        found.rest.append((k, st))
    return found


def _relative(draws: _Draws, live, ndim, lo_s, hi_s, pairs, ranges, pixels_of, tied):
    """One candidate of a relative window for each live sample: (valid (n,), (1 - extent, extent,
    the anchor's draws)), drawing the extents, then the anchor's values where valid."""
    shape = (lo_s + (hi_s - lo_s) * draws.doubles(live, ndim)).astype(F)
    cand = live
    if pixels_of is not None:  # the aspect ratios of the window in pixels
        shape = shape * pixels_of
    if tied is not None:
        shape = _tie(draws, live, shape, tied)
    for (i, j), (r_lo, r_hi) in zip(pairs, ranges, strict=True):
        ratio = shape[:, i] / shape[:, j]
        cand = cand & (r_lo <= ratio) & (ratio <= r_hi)
    if pixels_of is not None:  # back to relative, where it fits in the image
        shape = shape / pixels_of
        cand = cand & ~(shape > 1).any(axis=1)
    u = draws.doubles(cand, ndim)
    return cand, (F(1) - shape, shape, u)


def _tie(draws: _Draws, live: np.ndarray, shape: np.ndarray, tied: np.ndarray) -> np.ndarray:
    """``RandomBBoxCrop._fix_aspect_ratios`` of each live sample's extents (n, ndim): a random
    order of the extents (``permutation(ndim)``: Fisher-Yates from the last place down, each
    place ``i`` swapped with ``next_uint32() & mask`` (the smallest all-ones mask >= i), drawn
    again while above ``i``), then each extent tied to one before it in that order set from
    it by the ratio ``tied[d1, d0]``, then all rescaled so the largest extent is kept."""
    n, ndim = shape.shape
    rows = np.arange(n)
    order = np.tile(np.arange(ndim), (n, 1))
    for i in range(ndim - 1, 0, -1):
        mask = (1 << i.bit_length()) - 1
        pick = np.zeros(n, np.intp)
        need = live.copy()
        while need.any():
            v = (draws.uint32(need) & np.uint64(mask)).astype(np.intp)
            ok = need & (v <= i)
            pick[ok] = v[ok]
            need &= ~ok
        at_i = order[:, i].copy()
        order[:, i] = order[rows, pick]
        order[rows, pick] = at_i
    shape = shape.copy()
    max_extent = shape.max(axis=1)
    for i0 in range(ndim):
        for i1 in range(i0 + 1, ndim):
            d0, d1 = order[:, i0], order[:, i1]
            ratio = tied[d1, d0]
            set_it = ratio > 0
            value = shape[rows, d0] * ratio
            shape[rows, d1] = np.where(set_it, value, shape[rows, d1])
    return (max_extent[:, None] * shape) / shape.max(axis=1)[:, None]
