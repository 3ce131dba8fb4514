"""``fn.box_encoder``: SSD's matching of ground-truth boxes to anchors (DALI's ``BoxEncoder``)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._boxes import box_rows

WHO = "box_encoder"
F = np.float32


def iou_matrix(boxes: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """(N, A) float32 IoU of ltrb ``boxes`` with ltrb ``anchors``, in DALI's float32 order:
    0 unless the boxes overlap strictly, else ``inter / (area_box + area_anchor - inter)``."""
    b = boxes[:, None, :]
    a = anchors[None, :, :]
    overlaps = (b[..., 0] < a[..., 2]) & (b[..., 2] > a[..., 0])
    overlaps &= (b[..., 1] < a[..., 3]) & (b[..., 3] > a[..., 1])
    w = (np.minimum(b[..., 2], a[..., 2]) - np.maximum(b[..., 0], a[..., 0])).astype(F)
    h = (np.minimum(b[..., 3], a[..., 3]) - np.maximum(b[..., 1], a[..., 1])).astype(F)
    inter = (w * h).astype(F)
    area_b = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).astype(F)[:, None]
    area_a = ((anchors[:, 2] - anchors[:, 0]) * (anchors[:, 3] - anchors[:, 1])).astype(F)[None]
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = (inter / ((area_b + area_a) - inter)).astype(F)
    return np.where(overlaps, iou, F(0)).astype(F)


def center_wh(ltrb: np.ndarray) -> np.ndarray:
    """[l, t, r, b] -> [cx, cy, w, h] in float32 (``0.5 * (l + r)``, ``r - l``)."""
    out = np.empty_like(ltrb, dtype=F)
    out[:, 0] = F(0.5) * (ltrb[:, 0] + ltrb[:, 2])
    out[:, 1] = F(0.5) * (ltrb[:, 1] + ltrb[:, 3])
    out[:, 2] = ltrb[:, 2] - ltrb[:, 0]
    out[:, 3] = ltrb[:, 3] - ltrb[:, 1]
    return out


def last_argmax(x: np.ndarray, axis: int) -> np.ndarray:
    """Index of the maximum along ``axis``; ties go to the last one (DALI compares with >=)."""
    n = x.shape[axis]
    return n - 1 - np.argmax(np.flip(x, axis=axis), axis=axis)


def match(boxes: np.ndarray, anchors: np.ndarray, criteria: float) -> tuple[np.ndarray, np.ndarray]:
    """(best box per anchor (A,), whether the anchor is matched (A,)).

    Every box first claims the anchor it overlaps most (its IoU there becomes 2, so no other box
    takes it unless it claimed it too: then the later box wins); then each anchor takes the box
    it overlaps most and keeps it when that IoU is above ``criteria``.
    """
    ious = iou_matrix(boxes, anchors)
    best_anchor = last_argmax(ious, axis=1)
    ious[np.arange(len(boxes)), best_anchor] = F(2)
    best_box = last_argmax(ious, axis=0)
    matched = ious[best_box, np.arange(len(anchors))] > F(criteria)
    return best_box, matched


class AnchorMatcher:
    """:func:`match` for one fixed set of anchors, several times faster, with the same result
    (this matching is most of the host time of SSD's input pipelines).

    How: the anchors are kept in reverse order, as contiguous columns, so that the first maximum
    of a row (numpy's fast ``argmax``) is the last one of the original order; each box's
    coordinates are broadcast into full rows before ``minimum``/``maximum`` (numpy's loops with
    a scalar operand are several times slower); the intersection is clamped at 0 instead of
    masked by the strict-overlap test, which gives the same IoU (0) for disjoint boxes when the
    anchors have positive areas and the boxes are well-formed (finite, ``r >= l``, ``b >= t``);
    :meth:`matches` falls back to :func:`match` for anything else. Only the matched columns
    look for their box (the last row holding the column's maximum).
    """

    def __init__(self, anchors: np.ndarray) -> None:
        rev = np.ascontiguousarray(anchors[::-1], dtype=F)
        self.lo = np.ascontiguousarray(rev[:, 0:2].T[:, None, :])  # (2, 1, A): l, t
        self.hi = np.ascontiguousarray(rev[:, 2:4].T[:, None, :])  # r, b
        self.area = ((rev[:, 2] - rev[:, 0]) * (rev[:, 3] - rev[:, 1])).astype(F)
        self.anchors = anchors
        self.fast = bool(np.isfinite(rev).all() and (self.area > 0).all())
        self._local = threading.local()
        self._zero_rows = np.zeros((2, 16, len(self.area)), F)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)  # the scratch arrays stay behind (threads' own)
        del state["_local"], state["_zero_rows"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._local = threading.local()
        self._zero_rows = np.zeros((2, 16, len(self.area)), F)

    def _scratch(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This thread's work arrays, reused (fresh ones of this size cost more in page faults
        than the arithmetic): two (2, n, A) float32 (x and y) and one (n, A)."""
        bufs = getattr(self._local, "bufs", None)
        if bufs is None or bufs.shape[1] < n:
            bufs = self._local.bufs = np.empty((5, max(n, 16), len(self.area)), F)
        return bufs[0:2, :n], bufs[2:4, :n], bufs[4, :n]

    def _zeros(self, n: int) -> np.ndarray:
        zeros = self._zero_rows  # shared, never written: replaced when too small
        if zeros.shape[1] < n:
            zeros = self._zero_rows = np.zeros((2, max(n, 2 * zeros.shape[1]), len(self.area)), F)
        return zeros[:, :n]

    def matches(self, boxes: np.ndarray, criteria: np.float32) -> tuple[np.ndarray, np.ndarray]:
        """(matched anchors, ascending; the box of each), as :func:`match` finds them
        (``boxes`` (N, 4) float32 ltrb, N > 0)."""
        if not self.fast or not (np.isfinite(boxes).all() and (boxes[:, 2:] >= boxes[:, :2]).all()):
            best, matched = match(boxes, self.anchors, criteria)
            idx = np.flatnonzero(matched)
            return idx, best[idx]
        n = len(boxes)
        full, ext, inter = self._scratch(n)
        full[:] = boxes[:, 2:4].T[:, :, None]  # x and y: each box's r, b broadcast into rows
        np.minimum(full, self.hi, out=ext)
        full[:] = boxes[:, 0:2].T[:, :, None]  # l, t
        np.maximum(full, self.lo, out=full)
        ext -= full
        np.maximum(self._zeros(n), ext, out=ext)  # zeros first: -0.0 becomes +0.0
        np.multiply(ext[0], ext[1], out=inter)
        area_b = ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).astype(F)
        union = np.add(area_b[:, None], self.area, out=ext[0])
        union -= inter
        ious = np.divide(inter, union, out=inter)  # >= +0: 0 / positive union when disjoint
        ious[np.arange(n), np.argmax(ious, axis=1)] = F(2)
        best_iou = ious.max(axis=0)
        hits = np.flatnonzero(best_iou > criteria)  # matched anchors, reversed order
        # each one's box: the last row holding the column's maximum
        ties = ious[:, hits] == best_iou[hits]
        box = (n - 1) - np.argmax(ties[::-1], axis=0)
        num = len(self.area)
        return ((num - 1) - hits)[::-1], box[::-1]


def offsets(box_cwh, anchor_cwh, means, stds, scale) -> np.ndarray:
    """SSD's regression targets: ``((b - a) / a_wh - mean) / std`` for the centre and
    ``(log(b_wh / a_wh) - mean) / std`` for the size, on coordinates scaled by ``scale``."""
    b = (box_cwh * F(scale)).astype(F)
    a = (anchor_cwh * F(scale)).astype(F)
    out = np.empty_like(b)
    out[:, :2] = ((b[:, :2] - a[:, :2]) / a[:, 2:] - means[:2]) / stds[:2]
    with np.errstate(divide="ignore"):
        out[:, 2:] = (np.log((b[:, 2:] / a[:, 2:]).astype(F)) - means[2:]) / stds[2:]
    return out.astype(F)


def _four(value, name: str) -> np.ndarray:
    v = np.asarray(value, np.float64).reshape(-1)
    if v.size != 4:
        raise ArgumentError(f"{WHO}: {name}={value!r} must be a list of 4 values")
    return v.astype(F)


@register(legacy=("BoxEncoder",))
class BoxEncoder(Operator):
    """Encodes each sample's boxes and labels against a fixed set of anchors, as SSD does.

    Inputs: ``bboxes`` (N, 4) float32 [l, t, r, b] and ``labels`` (N,) int32. Outputs, for the
    A anchors: ``encoded_bboxes`` (A, 4) float32 and ``encoded_labels`` (A,) int32. A matched
    anchor (see :func:`match`) gets its box as [cx, cy, w, h] (or, with ``offset``, the
    regression targets of :func:`offsets`) and its label; the others keep the anchor as
    [cx, cy, w, h] (zeros with ``offset``) and label 0.

    Args:
        anchors: the anchors, a flat list of [l, t, r, b] floats (required).
        criteria: IoU above which an anchor is matched, in [0, 1]. Default 0.5.
        offset: output regression targets instead of boxes. Default False.
        scale: coordinates are multiplied by it before the targets are computed. Default 1.
        means, stds: [x, y, w, h] normalisation of the targets. Default 0s and 1s.

    Example:
        >>> bboxes, labels = fn.box_encoder(bboxes, labels, criteria=0.5,
        ...                                 anchors=default_boxes.as_ltrb_list())
    """

    schema = "box_encoder"
    devices = ("cpu", "gpu")
    # numpy on the anchors, ~270 us of CPU a sample, holding the GIL between the calls: the CPU
    # version may go to the sample processes (BENCHMARKS.md, "Detection: where the SSD programs
    # wait")
    process_safe = True
    holds_gil = True
    num_inputs = (2, 2)
    num_outputs = 2

    def setup(
        self,
        *,
        anchors: Sequence[float] | None = None,
        criteria: float = 0.5,
        offset: bool = False,
        scale: float = 1.0,
        means: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
        stds: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
    ) -> None:
        if anchors is None:
            raise ArgumentError(f"{WHO}: anchors= is required (a flat list of ltrb floats)")
        a = np.asarray(anchors, np.float64).reshape(-1)
        if a.size % 4:
            raise ArgumentError(
                f"{WHO}: anchors has {a.size} values; it must hold whole boxes (4 values each)"
            )
        if not 0.0 <= float(criteria) <= 1.0:
            raise ArgumentError(f"{WHO}: criteria={criteria!r} must be in [0, 1]")
        self.anchors = a.astype(F).reshape(-1, 4)
        self.anchors_cwh = center_wh(self.anchors)
        self.matcher = AnchorMatcher(self.anchors)
        self.criteria = F(criteria)
        self.offset = bool(offset)
        self.scale = F(scale)
        self.means = _four(means, "means")
        self.stds = _four(stds, "stds")
        if (self.stds == 0).any():
            raise ArgumentError(f"{WHO}: stds={stds!r} must all be nonzero")

    def output_layouts(self, input_layouts):
        return ["", ""]

    def _labels(self, labels: np.ndarray, n: int) -> np.ndarray:
        flat = labels.reshape(-1)
        if flat.size != n:
            raise ArgumentError(f"{WHO}: {flat.size} labels for {n} bounding boxes")
        return flat

    def run_sample(self, inputs, args, param):
        boxes = box_rows(inputs[0], WHO)
        labels = self._labels(inputs[1], len(boxes))
        num = len(self.anchors)
        if self.offset:
            out = np.zeros((num, 4), F)
        else:
            out = self.anchors_cwh.copy()
        out_labels = np.zeros(num, labels.dtype)
        if len(boxes) == 0 or num == 0:
            return out, out_labels
        idx, box_idx = self.matcher.matches(boxes, self.criteria)
        cwh = center_wh(boxes)[box_idx]  # row-wise: the same as of the gathered rows
        if self.offset:
            cwh = offsets(cwh, self.anchors_cwh[idx], self.means, self.stds, self.scale)
        out[idx] = cwh
        out_labels[idx] = labels[box_idx]
        return out, out_labels

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.bbox import box_encoder_batch

        return box_encoder_batch(
            inputs[0],
            inputs[1],
            self.anchors,
            self.criteria,
            self.offset,
            self.scale,
            self.means,
            self.stds,
            stream=stream,
        )
