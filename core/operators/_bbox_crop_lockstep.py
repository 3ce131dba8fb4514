"""``random_bbox_crop``'s window search for every sample of a batch in lockstep, on numpy arrays.

The search of one sample (``RandomBBoxCrop.find_crop_reference``) is a loop of a few numpy
calls on arrays of two values per random draw; even scored in batches
(``_bbox_crop_search.py``), drawing the candidates one Python call at a time was most of the
operator's host time. Here every sample takes its *n*-th option at the same step: one step
draws the option and its candidates of all the unfinished samples, scores them and updates each
sample's best window, in a few dozen numpy calls whatever the batch size. A batch takes as many
steps as its slowest sample takes options (about 16 for a batch of 128 of SSD's crop, 3.4 on
average).

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
compare them, seed for seed). Searches it does not cover (fixed windows, aspect ratios tying two
extents, ``input_shape``, a window larger than the image) take ``_bbox_crop_search.py``.
"""

from __future__ import annotations

import numpy as np

from ._bbox_crop_search import Boxes, Search, score

F = np.float32
_MASK32 = np.uint64(0xFFFFFFFF)
_TO_DOUBLE = 1.0 / 9007199254740992.0  # 2**-53
_BLOCK = 32  # raw values drawn per sample at a time


def covers(op) -> bool:
    """Whether :func:`lockstep` covers ``op``'s search (a relative window, from ``scaling`` and
    ``aspect_ratio`` ranges that tie no extents)."""
    return not op.fixed_crop and not op.input_shape_given and not op._ar_tied


class _Streams:
    """The raw streams of the samples' generators, drawn ``_BLOCK`` values at a time."""

    def __init__(self, gens: list) -> None:
        self.gens = gens
        self.raw = np.stack([g.bit_generator.random_raw(_BLOCK) for g in gens])

    def ensure(self, end: int, live: np.ndarray) -> None:
        """Make positions below ``end`` readable for the ``live`` samples."""
        size = self.raw.shape[1]
        if end <= size:
            return
        grow = _BLOCK * -(-(end - size) // _BLOCK)
        raw = np.zeros((len(self.gens), size + grow), np.uint64)
        raw[:, :size] = self.raw
        for s in np.flatnonzero(live).tolist():
            raw[s, size:] = self.gens[s].bit_generator.random_raw(grow)
        self.raw = raw

    def take(self, pos: np.ndarray, k: int) -> np.ndarray:
        """(n, k) raw values from ``pos`` on (clamped to the stream: finished samples)."""
        cols = np.minimum(pos[:, None] + np.arange(k), self.raw.shape[1] - 1)
        return np.take_along_axis(self.raw, cols, axis=1)


def lockstep(op, boxes: Boxes, gens: list, samples: list[int], ndim: int) -> list[Search | None]:
    """The finished search of each sample of ``samples`` (a :class:`Search` holding its
    outcome, for ``RandomBBoxCrop._outcome``), or None where it must be done again the
    ordinary way (a rejected ``integers`` draw, or a window larger than the image)."""
    n = len(samples)
    idx = np.asarray(samples, np.intp)
    streams = _Streams([gens[s] for s in samples])
    num_opts = len(op.options)
    opt_no_crop = np.array([nc for nc, _ in op.options], bool)
    opt_thr = np.array([t for _, t in op.options], F)
    reject_below = np.uint64((2**32 - num_opts) % num_opts) if num_opts > 1 else None
    lo_s, hi_s = float(op.scaling[0]), float(op.scaling[1])
    pairs = [(i, j) for i in range(ndim) for j in range(i + 1, ndim)]
    ranges = [op.ar_ranges[k % len(op.ar_ranges)] for k in range(len(pairs))]
    total = op.total_num_attempts

    pos = np.zeros(n, np.int64)
    has32 = np.zeros(n, bool)
    buf32 = np.zeros(n, np.uint64)
    count = np.zeros(n, np.int64)
    best = np.full(n, -1.0, F)
    success = np.zeros(n, bool)
    done = np.zeros(n, bool)
    no_crop = np.zeros(n, bool)
    redo = np.zeros(n, bool)
    has_result = np.zeros(n, bool)
    res_lo = np.zeros((n, ndim), F)
    res_hi = np.zeros((n, ndim), F)
    res_keep = np.zeros((n, boxes.rows.shape[1]), bool)
    per_step = (num_opts > 1) + op.num_attempts * 2 * ndim
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        while True:
            live = ~done & ~redo
            if total >= 0:
                done |= live & (count >= total)
                live &= count < total
            if not live.any():
                break
            streams.ensure(int(pos[live].max()) + per_step, live)
            # the option: integers(len(options))
            if num_opts > 1:
                raw = streams.take(pos, 1)[:, 0]
                u32 = np.where(has32, buf32, raw & _MASK32)
                fresh = live & ~has32
                buf32 = np.where(fresh, raw >> np.uint64(32), buf32)
                pos += fresh
                has32 = np.where(live, ~has32, has32)
                m = u32 * np.uint64(num_opts)
                redo |= live & ((m & _MASK32) < reject_below)
                live &= ~redo
                choice = (m >> np.uint64(32)).astype(np.intp)
            else:
                choice = np.zeros(n, np.intp)
            stop = live & opt_no_crop[choice]
            no_crop |= stop
            done |= stop
            live &= ~stop
            threshold = opt_thr[choice]
            for _ in range(op.num_attempts):
                count += live
                u = streams.take(pos, ndim) >> np.uint64(11)
                pos += live * ndim
                shape = (lo_s + (hi_s - lo_s) * (u * _TO_DOUBLE)).astype(F)
                cand = live.copy()
                for (i, j), (r_lo, r_hi) in zip(pairs, ranges, strict=True):
                    ratio = shape[:, i] / shape[:, j]
                    cand &= (r_lo <= ratio) & (ratio <= r_hi)
                u = streams.take(pos, ndim) >> np.uint64(11)
                pos += cand * ndim
                high = F(1) - shape
                big = cand & (high < 0).any(axis=1)  # uniform(0, high < 0) raises
                redo |= big
                live &= ~big
                cand &= ~big
                if not cand.any():
                    continue
                anchor = (0.0 + high.astype(np.float64) * (u * _TO_DOUBLE)).astype(F)
                end = (anchor + shape).astype(F)
                sel = np.flatnonzero(cand)
                metric, keep, kept_any = score(op, boxes, idx[sel], anchor[sel], end[sel])
                valid = metric >= threshold[sel]
                better = ~((metric <= best[sel]) & ~valid)
                upd = sel[better]
                best[upd] = metric[better]
                res_lo[upd], res_hi[upd] = anchor[upd], end[upd]
                res_keep[upd] = keep[better]
                has_result[upd] = True
                success[upd] = valid[better] & kept_any[better]
            done |= live & success
    out: list[Search | None] = []
    for k in range(n):
        if redo[k]:
            out.append(None)
            continue
        st = Search(None, None, None, 0)
        st.done, st.no_crop, st.success = True, bool(no_crop[k]), bool(success[k])
        st.count, st.best = int(count[k]), float(best[k])
        if has_result[k]:
            lo, hi = res_lo[k], res_hi[k]
            st.result = ((lo, hi, lo, hi), res_keep[k])
        out.append(st)
    return out
