"""``fn.random_bbox_crop``: a random crop window that keeps the bounding boxes consistent (DALI's
``RandomBBoxCrop``). CPU only, as in DALI: its outputs feed ``fn.slice`` (or
``decoders.image_slice``) and the box operators.

How one sample's window is chosen (DALI's ``FindProspectiveCrop``; all arithmetic in float32):

1. Pick one *option* uniformly: one of ``thresholds``, or "no crop" when ``allow_no_crop``.
   "No crop" returns the whole image with every box, and ends the search.
2. Make up to ``num_attempts`` candidate windows for that option. A relative window draws each
   extent from ``scaling``, fixes the extents of every pair whose ``aspect_ratio`` range is a
   single value (in a random order, then rescaled so the largest extent is kept), skips the
   candidate unless every pair's ratio is in its range, then draws the anchor uniformly in
   [0, 1 - extent]. A fixed window (``crop_shape`` with ``input_shape``) draws an integer anchor
   in [0, input - crop] (or [input - crop, 0] when the crop is the larger).
3. A candidate's metric is the smallest (``all_boxes_above_threshold``, the default) or the
   largest IoU of a box with the window (``threshold_type="overlap"``: the share of the box's
   area inside the window). It becomes the current result when it meets the threshold or beats
   the best metric so far; the boxes are then filtered (by centroid inside the window, or with
   ``bbox_prune_threshold`` by the share of their area inside it) and mapped into the window
   (clamped to [0, 1]). The result is final when it met the threshold and kept a box; the
   attempts of the option still run (a later candidate can replace it), as in DALI.
4. Otherwise back to 1, until ``total_num_attempts`` candidates were made (then the best result
   so far is used, with a warning) or forever when it is not given.

A sample without boxes takes the first window made (DALI stopped warning about them). When
every candidate was rejected, the whole image is used (DALI gives an empty window). Random
numbers come from a generator per sample, seeded in ``batch_params`` from the operator's RNG,
so results do not depend on the thread count (they are not DALI's draws: DALI uses
``std::mt19937``).

The operator runs batch-wise (``run_batch_cpu``; the pipeline's path), with the outputs of
``run_sample`` for each sample: the generators are made together (``_seeded_generators.py``),
the searches go in lockstep on numpy arrays, reading each generator's raw stream as numpy does
(``_bbox_crop_lockstep.py``), and its last few samples (or one whose draws it does not read)
go on a round of candidates at a time (``_bbox_crop_search.py``). One sample's search a
candidate at a time (``find_crop_reference``) is the reference the tests compare them with.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError
from ..graph import DataNode, Operator, register
from ._bbox_crop_geometry import (
    SHAPE_LAYOUT,
    START_END,
    START_SHAPE,
    WHO,
    div32,
    f32,
    is_permutation,
    keep_boxes,
    overlap_metrics,
    read_boxes,
    remap_boxes,
    volume,
    write_boxes,
)
from ._bbox_crop_lockstep import lockstep
from ._bbox_crop_search import Boxes, Outcomes, Search, search_all
from ._seeded_generators import GeneratorPool
from ._small import per_sample

logger = logging.getLogger(__name__)

F = np.float32


def _floats(value, name: str) -> list[float]:
    try:
        out = [float(v) for v in np.asarray(value, np.float64).reshape(-1)]
    except (TypeError, ValueError):
        raise ArgumentError(f"{WHO}: {name}={value!r} must be a list of numbers") from None
    return out


@register(legacy=("RandomBBoxCrop",))
class RandomBBoxCrop(Operator):
    """Draws a crop window (``anchor``, ``shape``) and returns the boxes (and labels) that stay
    in it, mapped to its coordinates; see the module docstring for how the window is chosen.

    Inputs: ``bboxes`` (N, 4) or (N, 6) float32 in [0, 1], and optionally ``labels`` (N, ...).
    Outputs: ``anchor`` and ``shape`` (ndim,) float32, in [x, y, (z)] order, relative or, with
    ``crop_shape``, in pixels; ``bboxes`` (K, 2*ndim) float32 in the input's layout; ``labels``
    (K, ...) when given; ``bbox_indices`` (K,) int32 with ``output_bbox_indices``.

    Args:
        thresholds: minimum metric values to choose from. Default [0.0].
        threshold_type: ``"iou"`` (default) or ``"overlap"``.
        aspect_ratio: [min, max] of width/height (3-D: also x/z and y/z, six values).
            Default [1, 1].
        scaling: [min, max] of each relative extent. Default [1, 1].
        bbox_layout: e.g. ``"xyXY"`` (default) or ``"xyWH"``; ``ltrb`` (deprecated) picks one
            of those two.
        num_attempts: candidates per chosen threshold. Default 1.
        total_num_attempts: candidates in all, then the best so far is used. Default: no limit.
        allow_no_crop: "no crop" is one more option. Default True (False with ``crop_shape``).
        all_boxes_above_threshold: every box (default) or at least one must meet the threshold.
        bbox_prune_threshold: keep boxes by the share of their area inside the window instead
            of by centroid.
        crop_shape, input_shape: a fixed window size and the image size (per-sample argument
            inputs allowed), in the order of ``shape_layout`` (default ``"WH"``/``"WHD"``).
            ``input_shape`` alone makes ``aspect_ratio`` refer to pixels.
        output_bbox_indices: add the indices of the kept boxes as an output.

    Example:
        >>> anchor, shape, bboxes, labels = fn.random_bbox_crop(
        ...     bboxes, labels, aspect_ratio=[0.5, 2.0], thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
        ...     scaling=[0.3, 1.0], bbox_layout="xyXY", allow_no_crop=True, num_attempts=50)
        >>> images = fn.slice(images, anchor, shape, normalized_anchor=True,
        ...                   normalized_shape=True)
    """

    schema = "random_bbox_crop"
    num_inputs = (1, 2)
    num_outputs = 3
    is_random = True
    arg_inputs = frozenset({"crop_shape", "input_shape"})
    batch_level = True  # run_batch_cpu: the batch's windows are searched together

    def setup(
        self,
        *,
        thresholds: Sequence[float] = (0.0,),
        threshold_type: str = "iou",
        aspect_ratio: Sequence[float] | None = None,
        scaling: Sequence[float] | None = None,
        ltrb: bool | None = None,
        bbox_layout: str | None = None,
        num_attempts: int = 1,
        total_num_attempts: int | None = None,
        all_boxes_above_threshold: bool = True,
        allow_no_crop: bool | None = None,
        bbox_prune_threshold: float | None = None,
        crop_shape: Sequence[int] | None = None,
        input_shape: Sequence[int] | None = None,
        shape_layout: str | None = None,
        output_bbox_indices: bool = False,
    ) -> None:
        scale = _floats([1.0, 1.0] if scaling is None else scaling, "scaling")
        if len(scale) != 2 or not 0 <= scale[0] <= scale[1]:
            raise ArgumentError(
                f"{WHO}: scaling={scaling!r} must be a range [min, max] with 0 <= min <= max"
            )
        ar = _floats([1.0, 1.0] if aspect_ratio is None else aspect_ratio, "aspect_ratio")
        if len(ar) not in (2, 6):
            raise ArgumentError(
                f"{WHO}: aspect_ratio={aspect_ratio!r} must have 2 values (6 for 3-D boxes)"
            )
        self.ar_ranges = [(F(ar[i]), F(ar[i + 1])) for i in range(0, len(ar), 2)]
        # a range of one value ties two extents (a random order is drawn to fix them)
        self._ar_tied = any(lo == hi for lo, hi in self.ar_ranges)
        self._ar_floats = [(float(lo), float(hi)) for lo, hi in self.ar_ranges]
        for lo, hi in self.ar_ranges:
            if not 0 <= lo <= hi:
                raise ArgumentError(
                    f"{WHO}: aspect_ratio={aspect_ratio!r}: each range needs 0 <= min <= max"
                )
        self.scaling = (F(scale[0]), F(scale[1]))
        thr = _floats(thresholds, "thresholds")
        if not thr:
            raise ArgumentError(f"{WHO}: thresholds= needs at least one value")
        for t in thr:
            if not 0.0 <= t <= 1.0:
                raise ArgumentError(f"{WHO}: thresholds={thresholds!r}: {t} is not in [0, 1]")
        if threshold_type not in ("iou", "overlap"):
            raise ArgumentError(
                f"{WHO}: threshold_type={threshold_type!r} must be 'iou' or 'overlap'"
            )
        self.metric = threshold_type
        if not isinstance(num_attempts, int | np.integer) or num_attempts < 1:
            raise ArgumentError(f"{WHO}: num_attempts={num_attempts!r} must be >= 1")
        if total_num_attempts is not None and (
            not isinstance(total_num_attempts, int | np.integer) or total_num_attempts < 1
        ):
            raise ArgumentError(f"{WHO}: total_num_attempts={total_num_attempts!r} must be >= 1")
        self.num_attempts = int(num_attempts)
        self.total_num_attempts = -1 if total_num_attempts is None else int(total_num_attempts)
        if ltrb is not None and bbox_layout is not None:
            raise ArgumentError(
                f"{WHO}: ltrb={ltrb!r} and bbox_layout={bbox_layout!r} cannot be given together "
                "(ltrb is deprecated in favour of bbox_layout)"
            )
        self.bbox_layout = bbox_layout or ""
        self.ltrb = True if ltrb is None else bool(ltrb)
        self.shape_layout = shape_layout or ""
        self.crop_shape = None if crop_shape is None else [int(v) for v in crop_shape]
        self.input_shape = None if input_shape is None else [int(v) for v in input_shape]
        self._crop_given = crop_shape is not None
        self._input_given = input_shape is not None
        self._allow_no_crop = allow_no_crop
        self.prune = None if bbox_prune_threshold is None else float(bbox_prune_threshold)
        self.all_boxes = bool(all_boxes_above_threshold)
        self.output_bbox_indices = bool(output_bbox_indices)
        self.has_labels = False
        self._generators: GeneratorPool | None = None  # made at the first batch
        self._scaling_given, self._ar_given = scaling is not None, aspect_ratio is not None
        self.thresholds = [F(t) for t in thr]
        self.options: list[tuple[bool, np.float32]] = []
        # Again in bind_inputs, where argument inputs are known (input_shape may be one).
        self._configure(shape_node=self._crop_given)

    def bind_inputs(self, inputs, arg_nodes: dict[str, DataNode]) -> None:
        self.has_labels = len(inputs) == 2
        self.num_outputs = 3 + self.has_labels + self.output_bbox_indices
        self._configure("crop_shape" in arg_nodes, "input_shape" in arg_nodes)

    def _configure(self, crop_node: bool = False, shape_node: bool = False) -> None:
        """The options and the window mode, once it is known which of crop_shape/input_shape
        are given (as values or as argument inputs)."""
        crop = self._crop_given or crop_node
        shape = self._input_given or shape_node
        self.fixed_crop = crop
        self.input_shape_given = shape
        if crop and not shape:
            raise ArgumentError(f"{WHO}: crop_shape= needs input_shape= (the image size)")
        allow = self._allow_no_crop
        if crop:
            if allow:
                raise ArgumentError(
                    f"{WHO}: allow_no_crop=True is incompatible with crop_shape= (fixed windows)"
                )
            allow = False
            for name, given in (("aspect_ratio", self._ar_given), ("scaling", self._scaling_given)):
                if given:
                    raise ArgumentError(f"{WHO}: {name}= is incompatible with crop_shape=")
        elif allow is None:
            allow = True
        self.options = [(False, t) for t in self.thresholds] + ([(True, F(0))] if allow else [])

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs

    def batch_params(self, n: int) -> list[int]:
        return [int(s) for s in self.rng.integers(0, 2**63 - 1, size=n)]

    # --- one sample ---------------------------------------------------------------------------
    def _layout(self, ndim: int) -> str:
        if self.bbox_layout:
            return self.bbox_layout
        return START_END[ndim] if self.ltrb else START_SHAPE[ndim]

    def _shape_arg(self, name: str, args: dict, ndim: int) -> np.ndarray | None:
        value = args.get(name, getattr(self, name))
        if value is None:
            return None
        v = np.asarray(value).reshape(-1)
        if v.size != ndim:
            raise ArgumentError(
                f"{WHO}: {name}={v.tolist()} must have {ndim} values for {2 * ndim}-coordinate "
                "boxes"
            )
        layout = self.shape_layout or SHAPE_LAYOUT[ndim]
        if not is_permutation(layout, SHAPE_LAYOUT[ndim]):
            raise ArgumentError(
                f"{WHO}: shape_layout={layout!r} should be a permutation of {SHAPE_LAYOUT[ndim]!r}"
            )
        return np.asarray([v[layout.index(c)] for c in SHAPE_LAYOUT[ndim]], np.int64)

    def _fix_aspect_ratios(self, shape: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if not any(lo == hi for lo, hi in self.ar_ranges):
            return shape  # no extent is tied to another (and no random order is drawn)
        ndim = len(shape)
        fixed = np.zeros((ndim, ndim), F)
        k, need = 0, False
        for d0 in range(ndim):
            for d1 in range(d0 + 1, ndim):
                lo, hi = self.ar_ranges[k]
                if lo == hi:
                    fixed[d0, d1] = lo
                    fixed[d1, d0] = F(1.0 / float(lo)) if lo else F(np.inf)
                    need = True
                k = (k + 1) % len(self.ar_ranges)
        if not need:
            return shape
        order = rng.permutation(ndim)
        shape = shape.copy()
        max_extent = F(shape.max())
        for i0 in range(ndim):
            for i1 in range(i0 + 1, ndim):
                d0, d1 = order[i0], order[i1]
                if fixed[d1, d0] > 0:
                    shape[d1] = F(shape[d0] * fixed[d1, d0])
        new_max = F(shape.max())
        return ((max_extent * shape) / new_max).astype(F)

    def _valid_aspect_ratio(self, shape: np.ndarray) -> bool:
        k, ndim = 0, len(shape)
        for i in range(ndim):
            for j in range(i + 1, ndim):
                lo, hi = self.ar_ranges[k]
                ratio = F(shape[i] / shape[j])
                if not lo <= ratio <= hi:
                    return False
                k = (k + 1) % len(self.ar_ranges)
        return True

    def _candidate(self, rng, ndim, crop_shape, input_shape):
        """(relative window lo, hi, output window lo, hi) or None for a rejected shape."""
        if crop_shape is not None:
            span = input_shape - crop_shape
            anchor = np.asarray(
                [rng.integers(min(0, s), max(0, s), endpoint=True) for s in span], F
            )
            inp = input_shape.astype(F)
            out_lo, out_hi = anchor, (anchor + crop_shape.astype(F)).astype(F)
            rel_lo = (anchor / inp).astype(F)
            rel_hi = (rel_lo + (crop_shape.astype(F) / inp)).astype(F)
            return rel_lo, rel_hi, out_lo, out_hi
        shape = self._uniform(rng, *self.scaling, ndim).astype(F)
        if input_shape is not None:  # aspect ratios of the window in pixels
            inp = input_shape.astype(F)
            pixels = self._fix_aspect_ratios((shape * inp).astype(F), rng)
            if not self._valid_aspect_ratio(pixels):
                return None
            shape = (pixels / inp).astype(F)
            if (shape > 1).any():  # the square (say) of the long side does not fit
                return None
        else:
            shape = self._fix_aspect_ratios(shape, rng)
            if not self._valid_aspect_ratio(shape):
                return None
        high = (F(1) - shape).astype(np.float64)
        if (high < 0).any():  # uniform() refuses high < low
            anchor = np.asarray([rng.uniform(0.0, float(h)) for h in high], F)
        else:
            anchor = (0.0 + high * rng.random(ndim)).astype(F)  # rng.uniform(0, high) each
        rel_lo, rel_hi = anchor, (anchor + shape).astype(F)
        return rel_lo, rel_hi, rel_lo, rel_hi

    def _floats(self, rng, ndim, crop_shape, input_shape):
        """:meth:`_candidate` of a relative window whose aspect ratios tie no extents, the same
        draws and values, computed on Python floats rounded to float32 (:func:`f32`) instead
        of numpy arrays of two or three values (the operator's main per-candidate cost); the
        window's lo and hi are lists of floats."""
        lo, hi = float(self.scaling[0]), float(self.scaling[1])
        shape = [f32(lo + (hi - lo) * u) for u in rng.random(ndim).tolist()]
        if input_shape is not None:  # aspect ratios of the window in pixels
            inp = input_shape.astype(F).tolist()
            pixels = [f32(s * i) for s, i in zip(shape, inp, strict=True)]
            if not self._valid_ratios(pixels):
                return None
            shape = [div32(p, i) for p, i in zip(pixels, inp, strict=True)]
            if any(s > 1 for s in shape):
                return None
        elif not self._valid_ratios(shape):
            return None
        high = [f32(1.0 - s) for s in shape]
        if any(h < 0 for h in high):  # as _candidate: uniform() one extent at a time
            anchor = [f32(rng.uniform(0.0, h)) for h in high]
        else:
            anchor = [
                f32(0.0 + h * u) for h, u in zip(high, rng.random(ndim).tolist(), strict=True)
            ]
        end = [f32(a + s) for a, s in zip(anchor, shape, strict=True)]
        return anchor, end, anchor, end

    def _valid_ratios(self, shape: list[float]) -> bool:
        """:meth:`_valid_aspect_ratio` of a shape given as float32 values in Python floats."""
        k, ndim, ranges = 0, len(shape), self._ar_floats
        for i in range(ndim):
            for j in range(i + 1, ndim):
                lo, hi = ranges[k]
                if not lo <= div32(shape[i], shape[j]) <= hi:
                    return False
                k = (k + 1) % len(ranges)
        return True

    @staticmethod
    def _uniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
        """``rng.uniform(lo, hi, n)`` (the same draws and values: numpy computes each as
        ``lo + (hi - lo) * next_double``), a few times faster for a few values."""
        lo, hi = float(lo), float(hi)
        return lo + (hi - lo) * rng.random(n)

    def _plan(self, rng, ndim, crop_shape, input_shape, iterations: int, planned: int):
        """The next ``iterations`` option draws and their candidates, drawn in the order
        :meth:`find_crop_reference` draws them: a list of (threshold, [candidate or None]), or
        None for "no crop" (the list ends there). ``planned`` candidates were drawn before; no
        option is drawn once ``total_num_attempts`` are. Drawing more than the search will use
        is harmless: the generator belongs to this sample."""
        plan: list = []
        for _ in range(iterations):
            if 0 <= self.total_num_attempts <= planned:
                break
            no_crop, threshold = self.options[int(rng.integers(len(self.options)))]
            if no_crop:
                plan.append(None)
                break
            make = self._candidate if self._ar_tied or crop_shape is not None else self._floats
            cands = [make(rng, ndim, crop_shape, input_shape) for _ in range(self.num_attempts)]
            planned += len(cands)
            plan.append((threshold, cands))
        return plan, planned

    def find_crop(self, lo, hi, rng, crop_shape=None, input_shape=None):
        """(window lo, window hi, kept box indices, kept lo, kept hi) for one sample.

        The search of :meth:`find_crop_reference`, with its random draws and its result, but
        the candidates of a few options at a time are scored in one numpy computation
        (``_bbox_crop_search.py``)."""
        n = len(lo)
        if n == 0:
            return self.find_crop_reference(lo, hi, rng, crop_shape, input_shape)
        ndim = lo.shape[1]
        boxes = Boxes(lo, hi, [n], volume(np.subtract(hi, lo, dtype=F)))
        st = Search(rng, crop_shape, input_shape, first_round=4)
        search_all(self, boxes, [st], ndim, [0])
        rel_lo, rel_hi, out_lo, out_hi, kept = self._outcome(st, ndim, n)
        if kept is None:  # the whole image, every box as it is
            return out_lo, out_hi, np.arange(n), lo, hi
        new_lo, new_hi = remap_boxes(rel_lo, rel_hi, lo[kept], hi[kept])
        return out_lo, out_hi, kept, new_lo, new_hi

    def _outcome(self, st: Search, ndim: int, n: int):
        """(relative window lo, hi, output window lo, hi, kept box indices) of a finished
        search of a sample with ``n`` boxes; kept is None for the whole image with every box
        unchanged (the "no crop" option, or no candidate at all). Warns when the search ended
        without a window that met its threshold."""
        if not st.no_crop and not st.success:
            self._warn_no_window(st.count, st.best)
        if st.no_crop or st.result is None:
            ones = np.ones(ndim, F)
            out_hi = ones if st.crop_shape is None else st.input_shape.astype(F)
            return np.zeros(ndim, F), ones, np.zeros(ndim, F), out_hi, None
        cand, mask = st.result
        rel_lo, rel_hi, out_lo, out_hi = (np.asarray(v, F) for v in cand)
        return rel_lo, rel_hi, out_lo, out_hi, np.nonzero(mask[:n])[0]

    @staticmethod
    def _warn_no_window(count: int, best: float) -> None:
        logger.warning(
            "%s: could not find a valid cropping window to satisfy the specified "
            "requirements (attempted %d times); using the best cropping window so far "
            "(best_metric=%g)",
            WHO,
            count,
            float(best),
        )

    def find_crop_reference(self, lo, hi, rng, crop_shape=None, input_shape=None):
        """:meth:`find_crop`, one candidate at a time, as the module docstring tells it (the
        reference its tests compare it with; samples without boxes take this path)."""
        ndim = lo.shape[1] if lo.ndim == 2 else 2
        n = len(lo)
        count, best = 0, F(-1)
        result = None
        success = False
        while not success and (self.total_num_attempts < 0 or count < self.total_num_attempts):
            no_crop, threshold = self.options[int(rng.integers(len(self.options)))]
            if no_crop:
                out_hi = np.ones(ndim, F)
                if crop_shape is not None:
                    out_hi = input_shape.astype(F)
                return np.zeros(ndim, F), out_hi, np.arange(n), lo, hi
            for _ in range(self.num_attempts):
                count += 1
                cand = self._candidate(rng, ndim, crop_shape, input_shape)
                if cand is None:
                    continue
                rel_lo, rel_hi, out_lo, out_hi = cand
                if n == 0:  # nothing to keep: the first window will do
                    empty = np.zeros((0, ndim), F)
                    return out_lo, out_hi, np.zeros(0, np.int64), empty, empty
                metrics = overlap_metrics(rel_lo, rel_hi, lo, hi, self.metric)
                metric = F(metrics.min() if self.all_boxes else metrics.max())
                valid = bool(metric >= threshold)
                if metric <= best and not valid:
                    continue
                best = metric
                keep = keep_boxes(rel_lo, rel_hi, lo, hi, self.prune)
                new_lo, new_hi = remap_boxes(rel_lo, rel_hi, lo[keep], hi[keep])
                result = (out_lo, out_hi, keep, new_lo, new_hi)
                success = valid and len(keep) > 0
        if not success:
            self._warn_no_window(count, best)
            if result is None:  # every candidate had a bad aspect ratio: the whole image
                # (DALI returns an empty window then)
                full = np.ones(ndim, F) if crop_shape is None else input_shape.astype(F)
                return np.zeros(ndim, F), full, np.arange(n), lo, hi
        return result

    def _check(self, boxes: np.ndarray, labels: np.ndarray | None) -> int:
        """The boxes' ndim (2 or 3), after the checks of the inputs."""
        if boxes.dtype != np.float32:
            raise ArgumentError(f"{WHO}: bounding boxes must be float32, got {boxes.dtype}")
        if boxes.ndim != 2 or boxes.shape[1] not in (4, 6):
            raise ArgumentError(
                f"{WHO}: bounding boxes must have shape (N, 4) or (N, 6), got {boxes.shape}"
            )
        if labels is not None and len(labels) != len(boxes):
            raise ArgumentError(f"{WHO}: {len(labels)} labels for {len(boxes)} bounding boxes")
        return boxes.shape[1] // 2

    def _shapes(self, args: dict, ndim: int):
        """(crop_shape, input_shape) of one sample, in canonical order, or None each."""
        crop_shape = self._shape_arg("crop_shape", args, ndim) if self.fixed_crop else None
        input_shape = self._shape_arg("input_shape", args, ndim) if self.input_shape_given else None
        return crop_shape, input_shape

    def run_sample(self, inputs, args, param):
        boxes = inputs[0]
        labels = inputs[1] if self.has_labels else None
        ndim = self._check(boxes, labels)
        layout = self._layout(ndim)
        lo, hi = read_boxes(boxes, layout)
        crop_shape, input_shape = self._shapes(args, ndim)
        rng = np.random.default_rng(param)
        out_lo, out_hi, keep, new_lo, new_hi = self.find_crop(lo, hi, rng, crop_shape, input_shape)
        outs = [
            np.asarray(out_lo, F).copy(),
            (np.asarray(out_hi, F) - np.asarray(out_lo, F)).astype(F),
            write_boxes(new_lo, new_hi, layout).reshape(-1, 2 * ndim),
        ]
        if self.has_labels:
            outs.append(labels[keep].copy())
        if self.output_bbox_indices:
            outs.append(np.asarray(keep, np.int32))
        return tuple(outs)

    def run_batch_cpu(self, inputs, args, params):
        """The batch's windows (the module docstring tells how): per sample, the outputs of
        :meth:`run_sample` with the same seed; the anchors and shapes as (n, ndim) arrays."""
        n = len(inputs[0])
        boxes_in = [np.asarray(b) for b in inputs[0]]
        labels_in = inputs[1] if self.has_labels else [None] * n
        kinds = {(b.dtype, b.ndim, b.shape[-1] if b.ndim else 0) for b in boxes_in}
        mismatch = self.has_labels and any(
            len(lab) != len(b) for lab, b in zip(labels_in, boxes_in, strict=True)
        )
        ndims, shapes = set(), [(None, None)] * n
        if (
            len(kinds) != 1
            or mismatch
            or next(iter(kinds)) not in ((F, 2, 4), (F, 2, 6))
            or self.fixed_crop
            or self.input_shape_given
        ):  # one at a time: the shapes, or the error of the first sample that has one
            shapes = []
            for i in range(n):
                try:
                    ndim = self._check(boxes_in[i], labels_in[i])
                    shapes.append(self._shapes({k: v[i] for k, v in args.items()}, ndim))
                except Exception as e:
                    e.sample_index = i
                    raise
                ndims.add(ndim)
        elif n:
            ndims.add(next(iter(kinds))[2] // 2)
        if len(ndims) != 1:  # 2-D and 3-D boxes in one batch: one sample at a time
            outs = per_sample(self.run_sample, inputs, args, params, n)
            return [[o[k] for o in outs] for k in range(self.num_outputs)]
        (ndim,) = ndims
        layout = self._layout(ndim)
        counts = [len(b) for b in boxes_in]
        lo, hi = self._read_all(boxes_in, layout, ndim)
        if self._generators is None:
            self._generators = GeneratorPool()
        rngs = self._generators.seeded(params)  # default_rng(param) each, made faster
        out = Outcomes(n, ndim, max(counts, default=0))
        active = [i for i in range(n) if counts[i]]
        searches: list = [None] * n
        rest = []  # the samples the ordinary search ends
        if active:
            boxes = Boxes(lo, hi, counts, volume(np.subtract(hi, lo, dtype=F)))
            found = lockstep(self, boxes, rngs, active, ndim, params, shapes)
            out.take_lockstep(np.asarray(active), found, counts, shapes)
            for k in np.flatnonzero(found.done & ~found.no_crop & ~found.success).tolist():
                self._warn_no_window(int(found.count[k]), float(found.best[k]))
            for k, st in found.rest:
                s = active[k]
                if st is None:  # from the sample's first draw
                    st = Search(np.random.default_rng(params[s]), *shapes[s], first_round=2)
                searches[s] = st
                rest.append(s)
            search_all(self, boxes, searches, ndim, rest)
            for s in rest:
                out.take_search(s, *self._outcome(searches[s], ndim, counts[s]), counts[s])
        for i in range(n):
            if counts[i] == 0:  # the first window will do (find_crop_reference)
                empty = np.zeros((0, ndim), F)
                crop, inp = shapes[i]
                out_lo, out_hi, _, _, _ = self.find_crop_reference(empty, empty, rngs[i], crop, inp)
                out.anchors[i], out.ends[i] = out_lo, out_hi
        return out.outputs(self, lo, hi, counts, labels_in, layout)

    def _read_all(self, boxes_in: list, layout: str, ndim: int):
        """(lo, hi) of every sample's boxes, concatenated (:func:`read_boxes`; an error names
        its sample and the box in it)."""
        rows = np.concatenate(boxes_in) if boxes_in else np.zeros((0, 2 * ndim), F)
        try:
            return read_boxes(rows, layout)
        except ArgumentError:
            for i, b in enumerate(boxes_in):
                try:
                    read_boxes(b, layout)
                except ArgumentError as e:
                    e.sample_index = i
                    raise
            raise
