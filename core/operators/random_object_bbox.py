"""``fn.segmentation.random_object_bbox``: the bounding box of a randomly chosen object of a
label map (DALI's ``RandomObjectBBox``, ``dali/operators/segmentation/random_object_bbox.cc``).

Per sample: with probability ``foreground_prob`` a foreground box is picked, else (or when no
object qualifies) the whole input is returned with the background label. A foreground pick
first draws a class (uniformly among the classes present, or by ``class_weights``), then one of
that class's connected blobs (face connectivity, ``_blobs.py``), optionally among the
``k_largest`` by volume and only those at least ``threshold`` in every extent; a class without
such a blob is dropped and another drawn. With ``ignore_class`` every blob of every class is a
candidate at once. Random numbers come from a per-sample generator seeded in ``batch_params``,
so results do not depend on the thread count (they are not DALI's bit for bit: DALI draws from
its own mt19937 streams).
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ._blobs import object_boxes

_FORMATS = ("anchor_shape", "start_end", "box")
_TYPES = tuple(
    np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32)
)


def _ints(name: str, v, who: str) -> np.ndarray:
    a = np.atleast_1d(np.asarray(v)).reshape(-1)
    if a.dtype.kind not in "iub" and not (a.dtype.kind == "f" and np.all(a == np.round(a))):
        raise ArgumentError(f"{who}: {name}={np.asarray(v).tolist()!r} must be integers")
    return a.astype(np.int64)


def pick_box(boxes: np.ndarray, threshold, k_largest: int | None, rng) -> int:
    """DALI's ``PickBox``: the index of a random box among those at least ``threshold`` in
    every extent (order kept), among the ``k_largest`` by volume (ties: lower index first);
    -1 when none qualifies."""
    idx = np.arange(len(boxes))
    if threshold is not None and len(boxes):
        ext = boxes[:, 1] - boxes[:, 0]
        idx = idx[np.all(ext >= np.asarray(threshold)[None, :], axis=1)]
    n = len(idx)
    if n == 0:
        return -1
    if k_largest is not None and k_largest < n:
        vol = np.prod(boxes[idx, 1] - boxes[idx, 0], axis=1)
        ranked = idx[np.lexsort((np.arange(n), -vol))]
        return int(ranked[rng.integers(k_largest)])
    return int(idx[rng.integers(n)])


def class_info(background, classes, weights) -> tuple[int, list[int], list[float]]:
    """DALI's ``ClassInfo::Init``: (background, classes, weights), with classes given or
    implied by the weights (consecutive labels skipping the background), and the background
    moved below the lowest class when it was not given and collides with a class.

    Raises:
        ArgumentError: a class equal to an explicitly given background.
    """
    bg = 0 if background is None else int(background)
    cls = None if classes is None else [int(c) for c in classes]
    w = None if weights is None else [float(x) for x in np.asarray(weights, np.float32)]
    if cls is not None:
        if bg in cls:
            if background is not None:
                raise ArgumentError(
                    f"segmentation.random_object_bbox: class label {bg} coincides with the "
                    "background label; give a different background or remove it from classes"
                )
            bg = min(cls) - 1
        if w is None:
            w = [1.0] * len(cls)
    elif w is not None:
        cls, c = [], 0
        for _ in w:
            if c == bg:
                c += 1
            cls.append(c)
            c += 1
    return bg, cls or [], w or []


def pick_class(weights: list[float], rng) -> int:
    """DALI's ``PickClassLabel``: a class index by the weights (float32 CDF accumulated in
    double), zero weights skipped; -1 when none is left."""
    cdf = np.cumsum(np.asarray(weights, np.float64)).astype(np.float32)
    if not len(cdf) or float(np.sum(np.asarray(weights, np.float64))) <= 0:
        return -1
    pos = rng.random() * float(cdf[-1])
    i = int(np.searchsorted(cdf, pos, side="left"))
    while i < len(weights) and weights[i] == 0:
        i += 1
    return i if i < len(weights) else -1


@register
class RandomObjectBBox(Operator):
    """Picks a random object of a label map and returns its bounding box (CPU only, as DALI).

    Args:
        format: ``"anchor_shape"`` (default; two outputs), ``"start_end"`` (two outputs:
            start and one-past-end) or ``"box"`` (one output: start and end concatenated).
            Coordinates are int32, one per input axis.
        foreground_prob: probability of a foreground box (default 1.0); argument input allowed.
        classes: labels that count as foreground (default: every label but ``background``).
        background: the background label (default 0, or below the lowest of ``classes``).
        class_weights: relative probability of each class (of ``classes``, or of labels 1, 2,
            ... when ``classes`` is not given).
        k_largest: choose only among the k largest blobs (by box volume) of the class.
        threshold: per-axis minimum box extent; a class without such a blob is dropped.
        ignore_class: choose among all blobs of all classes at once (not with ``classes``,
            ``class_weights`` or ``output_class``).
        output_class: add an output, the chosen class label (int32 scalar; the background
            label when the whole input was returned).
        cache_objects: remember the boxes of inputs seen before (by a hash of their bytes).

    Example:
        >>> roi_start, roi_end = fn.segmentation.random_object_bbox(
        ...     label, format="start_end", foreground_prob=0.4, cache_objects=True)
    """

    schema = "segmentation.random_object_bbox"
    ops_name = "RandomObjectBBox"
    is_random = True
    arg_inputs = frozenset(
        {"background", "classes", "foreground_prob", "class_weights", "threshold"}
    )

    def setup(
        self,
        *,
        format="anchor_shape",
        foreground_prob=1.0,
        classes=None,
        background=None,
        class_weights=None,
        k_largest=None,
        threshold=None,
        ignore_class=False,
        output_class=False,
        cache_objects=False,
    ) -> None:
        who = self.schema
        if format not in _FORMATS:
            raise ArgumentError(
                f'{who}: format={format!r} is not one of "anchor_shape", "start_end", "box"'
            )
        self.format = format
        self.ignore_class = bool(ignore_class)
        self.output_class = bool(output_class)
        if self.ignore_class and (
            classes is not None or class_weights is not None or self.output_class
        ):
            raise ArgumentError(
                f"{who}: classes, class_weights and output_class cannot be used when "
                "ignore_class is True"
            )
        if k_largest is not None and int(k_largest) < 1:
            raise ArgumentError(f"{who}: k_largest={k_largest} must be at least 1")
        self.k_largest = None if k_largest is None else int(k_largest)
        self._static = {
            "foreground_prob": foreground_prob,
            "classes": classes,
            "background": background,
            "class_weights": class_weights,
            "threshold": threshold,
        }
        self._check_args(self._static)
        self.cache_objects = bool(cache_objects)
        self._cache: dict = {}
        self._cache_lock = threading.Lock()
        self.num_outputs = 1 + (format != "box") + self.output_class

    def _check_args(self, a: dict) -> None:
        who = self.schema
        if a["foreground_prob"] is not None:
            p = float(np.asarray(a["foreground_prob"]).reshape(-1)[0])
            if not 0.0 <= p <= 1.0:
                raise ArgumentError(f"{who}: foreground_prob={p} must be in [0, 1]")
        if a["classes"] is not None:
            _ints("classes", a["classes"], who)
        if a["threshold"] is not None:
            _ints("threshold", a["threshold"], who)
        if a["class_weights"] is not None:
            w = np.atleast_1d(np.asarray(a["class_weights"], np.float64)).reshape(-1)
            if (w < 0).any():
                raise ArgumentError(f"{who}: class_weights={w.tolist()} must not be negative")
            if a["classes"] is not None and w.size != np.size(a["classes"]):
                raise ArgumentError(
                    f"{who}: classes ({np.size(a['classes'])} values) and class_weights "
                    f"({w.size} values) must have the same length"
                )

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs

    def batch_params(self, n):
        return list(self.rng.integers(0, 2**63 - 1, n))

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        who = self.schema
        if x.dtype not in _TYPES:
            raise ArgumentError(
                f"{who}: unsupported input type {x.dtype}; use bool, uint8, int8, uint16, "
                "int16, uint32 or int32"
            )
        if not 1 <= x.ndim <= 6:
            raise ArgumentError(f"{who}: the input has {x.ndim} dimensions; must be 1..6")
        a = dict(self._static)
        if args:
            a.update(args)
            if self.ignore_class and ("classes" in args or "class_weights" in args):
                raise ArgumentError(
                    f"{who}: classes and class_weights cannot be used when ignore_class is True"
                )
            self._check_args(a)
        threshold = None
        if a["threshold"] is not None:
            threshold = _ints("threshold", a["threshold"], who)
            if threshold.size != x.ndim:
                raise ArgumentError(
                    f"{who}: threshold={threshold.tolist()} must have one value per input axis "
                    f"({x.ndim})"
                )
        rng = np.random.default_rng(param)
        bg, classes, weights = class_info(
            a["background"],
            None
            if self.ignore_class or a["classes"] is None
            else _ints("classes", a["classes"], who),
            None if self.ignore_class else a["class_weights"],
        )
        box, label = None, bg
        if rng.random() < float(np.asarray(a["foreground_prob"]).reshape(-1)[0]):
            box, label = self._foreground(x, bg, classes, weights, a, threshold, rng)
        if box is None:
            box, label = np.stack([np.zeros(x.ndim, np.int64), np.array(x.shape)]), bg
        lo, hi = box[0].astype(np.int32), box[1].astype(np.int32)
        if self.format == "box":
            outs = [np.concatenate([lo, hi])]
        elif self.format == "start_end":
            outs = [lo, hi]
        else:
            outs = [lo, hi - lo]
        if self.output_class:
            outs.append(np.array(label, np.int32))
        return tuple(outs) if len(outs) > 1 else outs[0]

    def _foreground(self, x, bg, classes, weights, a, threshold, rng):
        """(box, class label) of a foreground pick, or (None, background)."""
        cache = self._cache_entry(x)
        if self.ignore_class:
            boxes = self._boxes(cache, ("all", bg), lambda: object_boxes(x, bg))
            k = pick_box(boxes, threshold, self.k_largest, rng)
            return (boxes[k], bg) if k >= 0 else (None, bg)
        present = self._labels(cache, x)
        if a["classes"] is None and a["class_weights"] is None:
            classes = sorted(int(v) for v in present if v != bg)
            weights = [1.0] * len(classes)
        else:
            weights = [
                w if c in present and c != bg else 0.0
                for c, w in zip(classes, weights, strict=True)
            ]
        while True:
            i = pick_class(weights, rng)
            if i < 0:
                return None, bg
            label = classes[i]
            boxes = self._boxes(cache, label, lambda lab=label: object_boxes(x == lab, False))
            k = pick_box(boxes, threshold, self.k_largest, rng)
            if k >= 0:
                return boxes[k], label
            weights[i] = 0.0  # no blob of this class qualifies: draw another class

    def _cache_entry(self, x) -> dict | None:
        if not self.cache_objects:
            return None
        key = (x.shape, x.dtype.str, hashlib.blake2b(np.ascontiguousarray(x).data).digest())
        with self._cache_lock:
            return self._cache.setdefault(key, {})

    def _labels(self, cache, x) -> set:
        if cache is not None and "labels" in cache:
            return cache["labels"]
        labels = {int(v) for v in np.unique(x)}
        if cache is not None:
            cache["labels"] = labels
        return labels

    @staticmethod
    def _boxes(cache, key, compute):
        if cache is not None and key in cache:
            return cache[key]
        boxes = compute()
        if cache is not None:
            cache[key] = boxes
        return boxes
