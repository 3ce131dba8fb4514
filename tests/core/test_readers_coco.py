"""``fn.readers.coco`` on small COCO files written by the tests (sparse category ids, crowd
objects, images without objects, polygons and RLE masks)."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from conftest import check_checkpoint_resumes, file_reader_ids, sample_ids
from dlpipe import ArgumentError, DataNotFoundError, DecodeError, Pipeline, fn, ops
from dlpipe.readers._coco_masks import rle_to_string

# --- a small data set -----------------------------------------------------------------------

IMAGES = [  # (id, file, width, height), listed out of id order on purpose
    (42, "b.jpg", 20, 10),
    (7, "a.jpg", 40, 30),
    (99, "sub/c.jpg", 16, 12),
    (50, "d.jpg", 8, 8),
]
CATEGORIES = [18, 3, 90]  # file order; DALI numbers them 1, 2, 3 in this order


def rle_counts(mask: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE of a bool mask (column-major runs, background first)."""
    flat = mask.T.reshape(-1).astype(np.int8)
    change = np.nonzero(np.diff(flat))[0] + 1
    edges = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(edges).tolist()
    return runs if flat[0] == 0 else [0, *runs]


CROWD = np.zeros((30, 40), bool)
CROWD[20:30, 30:40] = True  # reaches the last pixel


def annotations() -> list[dict]:
    return [
        # image 7 (a.jpg, 40x30): a polygon object, a tiny object, a crowd RLE, a 2-part polygon
        dict(
            image_id=7,
            category_id=90,
            bbox=[1.5, 2.0, 4.0, 5.0],
            iscrowd=0,
            segmentation=[[1, 1, 5, 1, 5, 6, 1, 6]],
        ),
        dict(image_id=7, category_id=3, bbox=[0.0, 0.0, 0.05, 9.0], iscrowd=0, segmentation=[]),
        dict(
            image_id=7,
            category_id=18,
            bbox=[30.0, 20.0, 10.0, 10.0],
            iscrowd=1,
            segmentation={"size": [30, 40], "counts": rle_counts(CROWD)},
        ),
        dict(
            image_id=7,
            category_id=3,
            bbox=[10.0, 10.0, 12.0, 6.0],
            iscrowd=0,
            segmentation=[[10, 10, 14, 10, 14, 16, 10, 16], [18, 10, 22, 10, 22, 13, 18, 13]],
        ),
        # image 42 (b.jpg, 20x10): one object, compressed-RLE crowd
        dict(
            image_id=42,
            category_id=18,
            bbox=[2.0, 3.0, 6.0, 4.0],
            iscrowd=0,
            segmentation=[[2, 3, 8, 3, 8, 7, 2, 7]],
        ),
        # image 50 (d.jpg): only a crowd object; image 99 (sub/c.jpg): nothing
        dict(
            image_id=50,
            category_id=90,
            bbox=[1.0, 1.0, 2.0, 2.0],
            iscrowd=1,
            segmentation={"size": [8, 8], "counts": rle_to_string(np.array([9, 2, 6, 2, 45]))},
        ),
        dict(image_id=1234, category_id=3, bbox=[1, 1, 1, 1]),  # an image the file does not list
    ]


def write_coco(root, images=IMAGES, anns=None, categories=CATEGORIES, name="ann.json") -> str:
    for _, file, _, _ in images:
        path = os.path.join(root, file)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(f"image {file}".encode())
    doc = {
        "info": {"description": "test"},
        "images": [
            {"id": i, "file_name": f, "width": w, "height": h, "license": 1}
            for i, f, w, h in images
        ],
        "annotations": annotations() if anns is None else anns,
        "categories": [{"id": c, "name": f"c{c}", "supercategory": "x"} for c in categories],
    }
    path = os.path.join(root, name)
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


@pytest.fixture(autouse=True)
def in_process_reads(monkeypatch):
    """Read the images in the test's process: starting read processes for every small pipeline
    costs more than the test (the process path runs in the tests that turn it back on)."""
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")


@pytest.fixture
def coco(tmp_path):
    return str(tmp_path), write_coco(str(tmp_path))


def run_coco(batch_size=4, batches=1, num_threads=2, seed=3, **kw) -> list[list[np.ndarray]]:
    """Per output, the samples of ``batches`` runs."""
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=None, seed=seed)
    with pipe:
        outs = fn.readers.coco(name="Reader", **kw)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    got = None
    for _ in range(batches):
        tls = pipe.run()
        if got is None:
            got = [[] for _ in tls]
        for g, tl in zip(got, tls, strict=True):
            g += [np.array(tl.at(i)) for i in range(len(tl))]
    pipe.close()
    return got


# --- boxes, labels, order --------------------------------------------------------------------


@pytest.mark.parametrize("read_process", ["0", "1"])
def test_outputs_by_image_id_with_remapped_labels(coco, monkeypatch, read_process):
    monkeypatch.setenv("DLPIPE_READ_PROCESS", read_process)
    root, ann = coco
    images, boxes, labels = run_coco(file_root=root, annotations_file=ann)
    # sorted by id: 7 a.jpg, 42 b.jpg, 50 d.jpg, 99 sub/c.jpg
    assert [bytes(x) for x in images] == [
        f"image {f}".encode() for f in ["a.jpg", "b.jpg", "d.jpg", "sub/c.jpg"]
    ]
    assert all(x.dtype == np.uint8 and x.ndim == 1 for x in images)
    # categories 18, 3, 90 -> 1, 2, 3; the 0.05-wide box is below size_threshold=0.1
    want_boxes = [
        [[1.5, 2, 4, 5], [30, 20, 10, 10], [10, 10, 12, 6]],
        [[2, 3, 6, 4]],
        [[1, 1, 2, 2]],
        np.zeros((0, 4)),
    ]
    want_labels = [[3, 1, 2], [1], [3], []]
    for got, want in zip(boxes, want_boxes, strict=True):
        assert got.dtype == np.float32 and got.shape == np.shape(want)
        np.testing.assert_array_equal(got, np.asarray(want, np.float32).reshape(-1, 4))
    for got, want in zip(labels, want_labels, strict=True):
        assert got.dtype == np.int32 and got.shape == (len(want),)
        assert got.tolist() == want


def test_ltrb_ratio_and_original_category_ids(coco):
    root, ann = coco
    _, boxes, labels = run_coco(
        file_root=root, annotations_file=ann, ltrb=True, ratio=True, avoid_class_remapping=True
    )
    w, h = np.float32(40), np.float32(30)
    x, y, bw, bh = (np.float32(v) for v in (1.5, 2.0, 4.0, 5.0))
    np.testing.assert_array_equal(boxes[0][0], [x / w, y / h, (x + bw) / w, (y + bh) / h])
    np.testing.assert_array_equal(boxes[1][0], np.float32([2, 3, 8, 7]) / np.float32([20, 10] * 2))
    assert [lab.tolist() for lab in labels] == [[90, 18, 3], [18], [90], []]


def test_skip_empty_size_threshold_and_crowds(coco):
    root, ann = coco
    images, boxes, labels = run_coco(
        file_root=root, annotations_file=ann, skip_empty=True, include_iscrowd=False, batch_size=2
    )
    # crowds dropped: d.jpg (only a crowd) and sub/c.jpg (nothing) are empty and skipped
    assert [bytes(x) for x in images] == [b"image a.jpg", b"image b.jpg"]
    assert [lab.tolist() for lab in labels] == [[3, 2], [1]]
    _, boxes, labels = run_coco(file_root=root, annotations_file=ann, size_threshold=5.5)
    assert [lab.tolist() for lab in labels] == [[1, 2], [], [], []]  # w and h both >= 5.5


def test_images_argument_order_and_duplicates(coco):
    root, ann = coco
    images, _, labels, ids = run_coco(
        file_root=root,
        annotations_file=ann,
        images=["d.jpg", "a.jpg", "missing.jpg", "d.jpg"],
        image_ids=True,
        batch_size=3,
    )
    assert [bytes(x) for x in images] == [b"image d.jpg", b"image a.jpg", b"image d.jpg"]
    assert [x.tolist() for x in ids] == [[50], [7], [50]]
    assert all(x.dtype == np.int32 and x.shape == (1,) for x in ids)


def test_image_ids_and_source_info(coco):
    root, ann = coco
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=None)
    with pipe:
        out = fn.readers.coco(file_root=root, annotations_file=ann, image_ids=True)
        pipe.set_outputs(out[0], out[3])
    images, ids = pipe.run()
    assert [ids.at(i).tolist() for i in range(4)] == [[7], [42], [50], [99]]
    assert [images.source_info(i) for i in range(4)] == ["a.jpg", "b.jpg", "d.jpg", "sub/c.jpg"]


def test_legacy_spellings(coco):
    root, ann = coco
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        a = ops.COCOReader(file_root=root, annotations_file=ann, save_img_ids=True)()
        b = ops.readers.COCO(file_root=root, annotations_file=ann)()
        c = fn.coco_reader(file_root=root, annotations_file=ann, ltrb=True)
        pipe.set_outputs(a[3], b[2], c[1])
    ids, labels, boxes = pipe.run()
    assert ids.at(1).tolist() == [42] and labels.at(0).tolist() == [3, 1, 2]
    np.testing.assert_array_equal(boxes.at(1), [[2, 3, 8, 7]])
    assert ops.readers.COCO.__name__ == "COCO" and ops.COCOReader.__name__ == "COCO"


# --- polygons and masks ------------------------------------------------------------------------


def test_polygons_and_vertices(coco):
    root, ann = coco
    _, _, labels, polygons, vertices = run_coco(
        file_root=root, annotations_file=ann, polygon_masks=True
    )
    # a.jpg: object 0 one polygon, object 1 (crowd RLE) none, object 2 two polygons
    assert polygons[0].dtype == np.int32 and polygons[0].tolist() == [
        [0, 0, 4],
        [2, 4, 8],
        [2, 8, 12],
    ]
    want = np.float32(
        [[1, 1], [5, 1], [5, 6], [1, 6]]
        + [[10, 10], [14, 10], [14, 16], [10, 16]]
        + [[18, 10], [22, 10], [22, 13], [18, 13]]
    )
    assert vertices[0].dtype == np.float32
    np.testing.assert_array_equal(vertices[0], want)
    assert polygons[1].tolist() == [[0, 0, 4]]  # sample-relative vertex indices
    assert polygons[2].shape == (0, 3) and vertices[2].shape == (0, 2)  # a crowd RLE only
    # the deprecated ``masks`` counts coordinates (twice the vertex indices); ratio scales
    _, _, _, old, verts = run_coco(file_root=root, annotations_file=ann, masks=True, ratio=True)
    assert old[0].tolist() == [[0, 0, 8], [2, 8, 16], [2, 16, 24]]
    np.testing.assert_array_equal(verts[0], want / np.float32([40, 30]))


def box_mask(h, w, x0, y0, x1, y1) -> np.ndarray:
    """The pixels COCO's rasteriser fills for an axis-aligned polygon with integer corners."""
    m = np.zeros((h, w), bool)
    m[y0:y1, x0:x1] = True
    return m


def test_pixelwise_masks(coco):
    root, ann = coco
    images, _, labels, masks = run_coco(file_root=root, annotations_file=ann, pixelwise_masks=True)
    assert [m.shape for m in masks] == [(30, 40, 1), (10, 20, 1), (8, 8, 1), (12, 16, 1)]
    assert all(m.dtype == np.int32 for m in masks)
    # a.jpg: label 3 polygon, label 1 crowd RLE, label 2 two polygons; no overlaps
    want = np.zeros((30, 40), np.int32)
    want[CROWD] = 1
    want[box_mask(30, 40, 10, 10, 14, 16) | box_mask(30, 40, 18, 10, 22, 13)] = 2
    want[box_mask(30, 40, 1, 1, 5, 6)] = 3
    np.testing.assert_array_equal(masks[0][..., 0], want)
    np.testing.assert_array_equal(masks[1][..., 0], box_mask(10, 20, 2, 3, 8, 7) * 1)
    # d.jpg: compressed RLE [9, 2, 6, 2, 45]: pixels 9-10 and 17-18 in column-major order
    flat = np.zeros(64, np.int32)
    flat[[9, 10, 17, 18]] = 3
    np.testing.assert_array_equal(masks[2][..., 0], flat.reshape(8, 8).T)
    assert not masks[3].any()


def test_pixelwise_overlaps_higher_label_on_top_but_not_in_the_last_run(tmp_path):
    h, w = 6, 5
    a = box_mask(h, w, 0, 0, 3, 4)
    b = box_mask(h, w, 2, 2, 5, 6)  # overlaps a, and reaches the last pixel
    anns = [
        dict(image_id=1, category_id=1, bbox=[0, 0, 3, 4], segmentation=[[0, 0, 3, 0, 3, 4, 0, 4]]),
        dict(image_id=1, category_id=2, bbox=[2, 2, 3, 4], segmentation=[[2, 2, 5, 2, 5, 6, 2, 6]]),
        dict(
            image_id=1,
            category_id=3,
            bbox=[0, 0, 5, 6],
            iscrowd=1,
            segmentation={"size": [h, w], "counts": rle_counts(box_mask(h, w, 4, 4, 5, 6))},
        ),
    ]
    root = str(tmp_path)
    ann = write_coco(root, images=[(1, "x.jpg", w, h)], anns=anns, categories=[1, 2, 3])
    (mask,) = run_coco(file_root=root, annotations_file=ann, pixelwise_masks=True, batch_size=1)[3]
    want = np.zeros((h, w), np.int32)
    want[a] = 1
    want[b] = 2  # label 2 over label 1
    # label 3's run covers pixels (4..5, 4) in column-major order, the last run of the merge:
    # there DALI keeps the lower label (2) where both are set.
    np.testing.assert_array_equal(mask[..., 0], want)


def test_pixelwise_polygons_match_pycocotools(tmp_path):
    mask_api = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(5)
    h, w = 23, 31
    anns, refs = [], []
    for k in range(3):
        pts = rng.uniform(-2, 33, (6, 2)).astype(np.float32)
        coords = pts.ravel().tolist()
        anns.append(dict(image_id=1, category_id=k + 1, bbox=[0, 0, 5, 5], segmentation=[coords]))
        refs.append(mask_api.decode(mask_api.frPyObjects([coords], h, w)[0]).astype(bool))
    root = str(tmp_path)
    ann = write_coco(root, images=[(1, "x.jpg", w, h)], anns=anns, categories=[1, 2, 3])
    (mask,) = run_coco(file_root=root, annotations_file=ann, pixelwise_masks=True, batch_size=1)[3]
    for k, ref in enumerate(refs):  # the top label's pixels are its own
        if k == 2:
            assert ((mask[..., 0] == 3) == ref).all()
        assert (mask[..., 0][ref] >= k + 1).all()


# --- preprocessed annotations ----------------------------------------------------------------


def read_dali_array(path, dtype, per=1):
    """DALI's SaveToFile: a uint32 element count, then the raw elements."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<I", data)
    return np.frombuffer(data, dtype, n * per, 4)


@pytest.mark.parametrize("mode", ["polygon_masks", "pixelwise_masks"])
def test_preprocessed_annotations_round_trip(coco, tmp_path, mode):
    root, ann = coco
    out = tmp_path / f"pre_{mode}"
    out.mkdir()
    kw = {mode: True, "image_ids": True}
    want = run_coco(
        file_root=root,
        annotations_file=ann,
        skip_empty=True,
        ratio=True,
        save_preprocessed_annotations=True,
        save_preprocessed_annotations_dir=str(out),
        **kw,
    )
    # the files are DALI's: counts of elements, raw native data
    assert open(out / "filenames.dat").read() == "a.jpg\nb.jpg\nd.jpg\n"
    assert read_dali_array(out / "counts.dat", np.int32).tolist() == [3, 1, 1]
    assert read_dali_array(out / "offsets.dat", np.int32).tolist() == [0, 3, 4]
    assert read_dali_array(out / "labels.dat", np.int32).tolist() == [3, 1, 2, 1, 3]
    boxes = read_dali_array(out / "boxes.dat", np.float32)  # counted in floats
    assert boxes.size == 20 and boxes[0] == np.float32(1.5) / np.float32(40)
    assert read_dali_array(out / "original_ids.dat", np.int32).tolist() == [7, 42, 50]
    polys = read_dali_array(out / "polygon_data.dat", np.int32, 3)  # counted in ivec3
    assert polys.reshape(-1, 3).tolist() == [[0, 0, 4], [2, 4, 8], [2, 8, 12], [0, 0, 4]]
    assert read_dali_array(out / "polygons_count.dat", np.int64).tolist() == [3, 1, 0]
    assert read_dali_array(out / "vertices_offset.dat", np.int64).tolist() == [0, 12, 16]
    if mode == "pixelwise_masks":
        data = open(out / "masks_rles.dat", "rb").read()
        assert struct.unpack_from("<IQQQ", data) == (2, 30, 40, len(rle_counts(CROWD)))
        assert read_dali_array(out / "heights.dat", np.int32).tolist() == [30, 10, 8]
        assert read_dali_array(out / "masks_rles_idx.dat", np.int32).tolist() == [1, 0]
    got = run_coco(file_root=root, preprocessed_annotations=str(out), **kw)
    assert len(got) == len(want)
    for g_out, w_out in zip(got, want, strict=True):
        for g, w in zip(g_out, w_out, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def test_preprocessed_errors(coco, tmp_path):
    root, ann = coco
    out = tmp_path / "pre"
    out.mkdir()
    run_coco(
        file_root=root,
        annotations_file=ann,
        save_preprocessed_annotations=True,
        save_preprocessed_annotations_dir=str(out),
    )
    with pytest.raises(ArgumentError, match=r"ltrb=True cannot be used .*preprocessed"):
        run_coco(file_root=root, preprocessed_annotations=str(out), ltrb=True)
    data = (out / "boxes.dat").read_bytes()
    (out / "boxes.dat").write_bytes(data[:-8])
    with pytest.raises(DecodeError, match=r"boxes\.dat.*truncated"):
        run_coco(file_root=root, preprocessed_annotations=str(out))
    (out / "boxes.dat").write_bytes(data)
    (out / "labels.dat").write_bytes(struct.pack("<I3i", 3, 1, 2, 3))
    with pytest.raises(DecodeError, match=r"labels\.dat.*3 labels for 5 boxes"):
        run_coco(file_root=root, preprocessed_annotations=str(out))
    with pytest.raises(DataNotFoundError, match="preprocessed_annotations=.*not a directory"):
        run_coco(file_root=root, preprocessed_annotations=str(tmp_path / "none"))


# --- sharding, shuffling, checkpoints ----------------------------------------------------------


def numbered_coco(make_files, n) -> tuple[str, str]:
    """``make_files``' n files (content: their index) as a COCO set, ids in file order."""
    root, names = make_files(n)
    images = [(i + 1, name, 4, 4) for i, name in enumerate(names)]
    anns = [dict(image_id=i + 1, category_id=1, bbox=[0, 0, 1, 1]) for i in range(n)]
    doc = {
        "images": [{"id": i, "file_name": f, "width": w, "height": h} for i, f, w, h in images],
        "annotations": anns,
        "categories": [{"id": 1}],
    }
    path = os.path.join(root, "ann.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return root, path


@pytest.mark.parametrize(
    "kw",
    [
        dict(shard_id=1, num_shards=3),
        dict(shard_id=0, num_shards=4, pad_last_batch=True),
        dict(shard_id=2, num_shards=3, stick_to_shard=True, pad_last_batch=True),
        dict(shard_id=1, num_shards=2, random_shuffle=True, initial_fill=4),
        dict(shard_id=0, num_shards=2, shuffle_after_epoch=True),
    ],
)
def test_sharding_shuffling_and_padding_match_the_file_reader(make_files, kw):
    want, meta = file_reader_ids(make_files, 13, 3, 9, **kw)
    root, ann = numbered_coco(make_files, 13)
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None, seed=3)
    with pipe:
        images, _, _ = fn.readers.coco(file_root=root, annotations_file=ann, name="Reader", **kw)
        pipe.set_outputs(images)
    got = []
    for _ in range(9):
        got += sample_ids(pipe.run()[0])
    assert got == want
    assert pipe.reader_meta("Reader") == meta


def test_exact_samples_per_shard_and_epoch(coco):
    root, ann = coco
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        images, _, _ = fn.readers.coco(
            file_root=root, annotations_file=ann, shard_id=1, num_shards=2, name="Reader"
        )
        pipe.set_outputs(images)
    seen = [bytes(pipe.run()[0].at(0)) for _ in range(4)]
    # shard 1 of [a, b, d, sub/c] is [d, sub/c]; epoch 2 reads shard 0 (shards rotate)
    assert seen == [b"image d.jpg", b"image sub/c.jpg", b"image a.jpg", b"image b.jpg"]
    assert pipe.reader_meta("Reader")["epoch_size"] == 4


@pytest.mark.parametrize("stop", [0, 3, 7])
def test_checkpoint_resumes(coco, stop):
    root, ann = coco

    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=3, num_threads=2, seed=11, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            outs = fn.readers.coco(
                file_root=root,
                annotations_file=ann,
                random_shuffle=True,
                initial_fill=3,
                polygon_masks=True,
                pad_last_batch=True,
                num_shards=2,
                shard_id=1,
                name="Reader",
            )
            pipe.set_outputs(*outs)
        return pipe

    check_checkpoint_resumes(make, stop, 10)


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d["annotations"][0].pop("bbox"), r"annotations\[0\] has no 'bbox'"),
        (
            lambda d: d["annotations"][0].update(bbox=[1, 2, 3]),
            r"annotations\[0\]\.bbox must hold exactly 4 values",
        ),
        (lambda d: d["categories"].pop(), "category_id=90, which 'categories' does not list"),
        (lambda d: d["images"][1].pop("width"), r"images\[1\] \('a\.jpg'\) has no width"),
        (lambda d: d["categories"][0].pop("id"), r"categories\[0\] has no 'id'"),
        (
            lambda d: d["annotations"][3]["segmentation"][0].append(7),
            r"segmentation\[0\] must be a list of x, y pairs",
        ),
        (
            lambda d: d["annotations"][2]["segmentation"].update(size=[29, 40]),
            "RLE counts do not add up to 29x40",
        ),
        (lambda d: d.update(images={"a": 1}), "'images' must be a list"),
    ],
)
def test_bad_annotation_files_name_the_file_and_the_problem(coco, edit, match):
    root, ann = coco
    with open(ann) as f:
        doc = json.load(f)
    edit(doc)
    with open(ann, "w") as f:
        json.dump(doc, f)
    with pytest.raises(DecodeError, match=match) as e:
        run_coco(file_root=root, annotations_file=ann, ratio=True, pixelwise_masks=True)
    assert "ann.json" in str(e.value)


def test_argument_and_file_errors(coco, tmp_path):
    root, ann = coco
    with pytest.raises(ArgumentError, match="give annotations_file= or preprocessed"):
        run_coco(file_root=root)
    with pytest.raises(ArgumentError, match="file_root= is required"):
        run_coco(annotations_file=ann)
    with pytest.raises(ArgumentError, match="mutually exclusive"):
        run_coco(file_root=root, annotations_file=ann, polygon_masks=True, pixelwise_masks=True)
    with pytest.raises(ArgumentError, match="save_preprocessed_annotations_dir=None go together"):
        run_coco(file_root=root, annotations_file=ann, save_preprocessed_annotations=True)
    with pytest.raises(DataNotFoundError, match="annotations_file=.*nope.json.*does not exist"):
        run_coco(file_root=root, annotations_file=str(tmp_path / "nope.json"))
    (tmp_path / "broken.json").write_text('{"images": [')
    with pytest.raises(DecodeError, match=r"broken\.json.*not valid JSON"):
        run_coco(file_root=root, annotations_file=str(tmp_path / "broken.json"))
    with pytest.raises(ArgumentError, match="No files found"):
        run_coco(file_root=root, annotations_file=ann, images=["missing.jpg"])
    os.remove(os.path.join(root, "b.jpg"))
    with pytest.raises(DataNotFoundError, match=r"b\.jpg"):
        run_coco(file_root=root, annotations_file=ann)
