"""``fn.segmentation.select_masks`` against a reference written here, fed by
``readers.coco(polygon_masks=True)`` and ``random_bbox_crop``'s box indices, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.select_masks import SelectMasks

POLYGONS = np.array([[0, 0, 3], [1, 3, 7], [2, 7, 10]], np.int32)
VERTICES = np.arange(20, dtype=np.float32).reshape(10, 2)


def ref_select(mask_ids, polygons, vertices, reindex):
    """Per mask id in order: its last polygon in the input, vertices renumbered from 0."""
    out_p, out_v = [], []
    for k, m in enumerate(mask_ids):
        rows = [p for p in polygons if p[0] == m]
        _, s, e = rows[-1]
        out_p.append([k if reindex else m, len(out_v), len(out_v) + e - s])
        out_v += list(vertices[s:e])
    return np.array(out_p, np.int32).reshape(-1, 3), np.array(out_v).reshape(-1, vertices.shape[1])


def run(mask_ids, polygons=POLYGONS, vertices=VERTICES, **kw):
    return SelectMasks(**kw).run_sample(
        (np.asarray(mask_ids, np.int32), polygons, vertices), {}, None
    )


@pytest.mark.parametrize("reindex", [False, True])
@pytest.mark.parametrize("mask_ids", [[1], [2, 0], [0, 1, 2], []])
def test_matches_the_reference(mask_ids, reindex):
    polys, verts = run(mask_ids, reindex_masks=reindex)
    want_p, want_v = ref_select(mask_ids, POLYGONS, VERTICES, reindex)
    assert polys.dtype == np.int32 and polys.shape == (len(mask_ids), 3)
    assert verts.dtype == VERTICES.dtype and verts.shape == want_v.shape
    np.testing.assert_array_equal(polys, want_p)
    np.testing.assert_array_equal(verts, want_v)


def test_dali_example_and_the_last_polygon_of_a_mask():
    polys, verts = run([2, 0], reindex_masks=True)
    assert polys.tolist() == [[0, 0, 3], [1, 3, 6]]  # in mask_ids order (DALI's code)
    np.testing.assert_array_equal(verts, np.concatenate([VERTICES[7:10], VERTICES[0:3]]))
    two = np.array([[0, 0, 3], [0, 3, 5], [1, 5, 10]], np.int32)  # mask 0 has two polygons
    polys, verts = run([0], two)
    assert polys.tolist() == [[0, 0, 2]]  # only its last one, as DALI keeps
    np.testing.assert_array_equal(verts, VERTICES[3:5])
    v3 = np.arange(30, dtype=np.int16).reshape(10, 3)  # any vertex type and width
    polys, verts = run([1], vertices=v3)
    np.testing.assert_array_equal(verts, v3[3:7])


def test_errors():
    with pytest.raises(ArgumentError, match="duplicated values; got 1 again"):
        run([1, 1])
    with pytest.raises(ArgumentError, match="mask id 5 is not present"):
        run([5])
    with pytest.raises(ArgumentError, match=r"\[7, 11\) of mask id 2 is out of bounds"):
        run([2], np.array([[2, 7, 11]], np.int32))
    with pytest.raises(ArgumentError, match="backwards"):
        run([2], np.array([[2, 7, 5]], np.int32))
    with pytest.raises(ArgumentError, match="mask_ids must be 1-D int32"):
        run(np.zeros((1, 1)))
    with pytest.raises(ArgumentError, match=r"polygons must be \(P, 3\) int32"):
        run([0], POLYGONS[:, :2].copy())


def test_after_a_crop_in_a_pipeline(tmp_path, monkeypatch):
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")
    from test_readers_coco import write_coco

    root = str(tmp_path)
    ann = write_coco(root)
    pipe = Pipeline(batch_size=2, num_threads=2, device_id=None, seed=4)
    with pipe:
        _, boxes, labels, polygons, vertices = fn.readers.coco(
            file_root=root,
            annotations_file=ann,
            polygon_masks=True,
            ratio=True,
            ltrb=True,
            include_iscrowd=False,  # crowds are RLE: they have no polygon to select
            skip_empty=True,
        )
        crop = fn.random_bbox_crop(
            boxes, labels, bbox_layout="xyXY", scaling=[0.5, 1.0], output_bbox_indices=True
        )
        sel = ops.segmentation.SelectMasks(reindex_masks=True)(crop[4], polygons, vertices)
        pipe.set_outputs(crop[4], polygons, vertices, *sel)
    for _ in range(3):
        idx, polys, verts, got_p, got_v = pipe.run()
        for i in range(2):
            want_p, want_v = ref_select(idx.at(i).tolist(), polys.at(i), verts.at(i), True)
            np.testing.assert_array_equal(got_p.at(i), want_p)
            np.testing.assert_array_equal(got_v.at(i), want_v)
    pipe.close()
