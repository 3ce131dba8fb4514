"""``fn.segmentation.select_masks``: the polygons of chosen masks (DALI's ``SelectMasks``)."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register

WHO = "segmentation.select_masks"


def select_masks(
    mask_ids: np.ndarray, polygons: np.ndarray, vertices: np.ndarray, reindex: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(polygons, vertices) of the masks ``mask_ids``, in that order.

    As DALI's operator does, each selected mask keeps *one* polygon: the last one that
    ``polygons`` lists for it (a mask drawn as several polygons keeps only its last). Its
    vertices are copied in ``mask_ids`` order, and its row becomes [mask id (its index in
    ``mask_ids`` with ``reindex``), first vertex, end vertex] in the new vertex list.

    Raises:
        ArgumentError: a repeated or absent mask id, or a vertex range out of bounds.
    """
    chosen: dict[int, list[int]] = {}  # mask id -> [new id, start, end]
    for k, m in enumerate(mask_ids.tolist()):
        if m in chosen:
            raise ArgumentError(f"{WHO}: mask_ids should not have duplicated values; got {m} again")
        chosen[m] = [k if reindex else m, -1, -1]
    nverts = len(vertices)
    for m, start, end in polygons.tolist():
        entry = chosen.get(m)
        if entry is None:
            continue
        if start < 0 or end > nverts:
            raise ArgumentError(
                f"{WHO}: vertex range [{start}, {end}) of mask id {m} is out of bounds: there are "
                f"{nverts} vertices"
            )
        if end < start:
            raise ArgumentError(f"{WHO}: mask id {m} has a vertex range [{start}, {end}) backwards")
        entry[1], entry[2] = start, end
    out_polys = np.zeros((len(chosen), 3), np.int32)
    pieces = []
    at = 0
    for k, (m, (new_id, start, end)) in enumerate(chosen.items()):
        if start == -1 and end == -1:
            raise ArgumentError(f"{WHO}: selected mask id {m} is not present in the polygons")
        out_polys[k] = (new_id, at, at + end - start)
        pieces.append(vertices[start:end])
        at += end - start
    if pieces:
        out_verts = np.concatenate(pieces, axis=0)
    else:
        out_verts = np.zeros((0, *vertices.shape[1:]), vertices.dtype)
    return out_polys, np.ascontiguousarray(out_verts)


@register
class SelectMasks(Operator):
    """Keeps the polygons (and their vertices) of the masks listed in ``mask_ids``; the
    inputs are those of ``readers.coco(polygon_masks=True)``. See :func:`select_masks`.

    Inputs: ``mask_ids`` (K,) int32, ``polygons`` (P, 3) int32 [mask id, first vertex, end
    vertex], ``vertices`` (V, D) of any type. Outputs: ``polygons`` (K, 3) int32 and
    ``vertices`` (V', D).

    Args:
        reindex_masks: replace each mask id by its index in ``mask_ids``. Default False.

    Example:
        >>> anchor, shape, bboxes, labels, idx = fn.random_bbox_crop(
        ...     bboxes, labels, bbox_layout="xyXY", output_bbox_indices=True)
        >>> polygons, vertices = fn.segmentation.select_masks(idx, polygons, vertices,
        ...                                                   reindex_masks=True)
    """

    schema = "segmentation.select_masks"
    ops_name = "SelectMasks"
    num_inputs = (3, 3)
    num_outputs = 2

    def setup(self, *, reindex_masks: bool = False) -> None:
        self.reindex_masks = bool(reindex_masks)

    def output_layouts(self, input_layouts):
        return ["", ""]

    def run_sample(self, inputs, args, param):
        mask_ids, polygons, vertices = inputs
        if mask_ids.dtype != np.int32 or mask_ids.ndim != 1:
            raise ArgumentError(
                f"{WHO}: mask_ids must be 1-D int32, got {mask_ids.dtype} {mask_ids.shape}"
            )
        if polygons.dtype != np.int32 or polygons.ndim != 2 or polygons.shape[1] != 3:
            raise ArgumentError(
                f"{WHO}: polygons must be (P, 3) int32 [mask id, start, end], got "
                f"{polygons.dtype} {polygons.shape}"
            )
        if vertices.ndim != 2:
            raise ArgumentError(f"{WHO}: vertices must be 2-D (V, D), got {vertices.shape}")
        return select_masks(mask_ids, polygons, vertices, self.reindex_masks)
