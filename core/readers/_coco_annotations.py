"""The COCO annotation index behind ``readers.coco``: parsed from a COCO JSON file, or loaded from
(and saved to) DALI's preprocessed binary files, in the layout DALI's ``CocoLoader`` uses.

Everything is kept in flat arrays with per-sample offsets and counts, as DALI does, so 118k
images are a few arrays, not 118k small objects, and the preprocessed files are these arrays
written out:

* ``boxes`` (B, 4) float32 and ``labels`` (B,) int32; sample i owns rows
  ``[offsets[i], offsets[i] + counts[i])``.
* ``polygons`` (P, 3) int32 rows [object index in the sample, first vertex, end vertex] (vertex
  indices relative to the sample's first vertex) and ``vertices`` (V, 2) float32, with their
  own per-sample offsets and counts.
* ``rles`` (list of (h, w, counts)) and ``rle_objects`` (object index in the sample), per-sample
  offsets and counts; ``heights``/``widths`` of each sample's image (pixelwise masks only).
* ``filenames`` (sample i's file) and ``image_ids`` (its id in the JSON file).

How the JSON becomes samples (DALI's ``ParseJsonAnnotations``):

* Images are sorted by id (or taken in the order of ``images=``, duplicates included); an image
  missing from the JSON is left out.
* An object is kept when its box's width and height are both >= ``size_threshold`` (pixels),
  and, with ``include_iscrowd=False``, when it is not a crowd. Objects keep the file's order.
* Labels are the category ids remapped to 1, 2, ... in the order the categories appear in the
  file (COCO files list them by id), unless ``avoid_class_remapping``.
* ``ltrb`` turns [x, y, w, h] into [l, t, r, b]; ``ratio`` divides x coordinates by the image
  width and y coordinates by its height (boxes and polygon vertices).
* ``skip_empty`` leaves out the images without objects.

Deliberate differences: where DALI reads garbage or crashes (an object of a category the file
does not list gets label 0 in DALI; a missing ``bbox``, ``width`` or ``height``; an odd number
of polygon coordinates; an RLE of another size than its image), this raises an error naming
the file and the annotation.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from ..errors import ArgumentError, DataNotFoundError, DecodeError
from ._coco_masks import rle_from_string

WHO = "readers.coco"


@dataclass
class CocoIndex:
    """Per-sample annotations in flat arrays (see the module docstring)."""

    filenames: list[str]
    offsets: np.ndarray
    counts: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray
    image_ids: np.ndarray | None = None
    polygons: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int32))
    polygon_offsets: np.ndarray | None = None
    polygon_counts: np.ndarray | None = None
    vertices: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.float32))
    vertex_offsets: np.ndarray | None = None
    vertex_counts: np.ndarray | None = None
    rles: list = field(default_factory=list)  # (h, w, counts uint32)
    rle_objects: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    mask_offsets: np.ndarray | None = None
    mask_counts: np.ndarray | None = None
    heights: np.ndarray | None = None
    widths: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.filenames)

    def sample_boxes(self, i: int) -> np.ndarray:
        o, c = int(self.offsets[i]), int(self.counts[i])
        return self.boxes[o : o + c]

    def sample_labels(self, i: int) -> np.ndarray:
        o, c = int(self.offsets[i]), int(self.counts[i])
        return self.labels[o : o + c]

    def sample_polygons(self, i: int) -> np.ndarray:
        if self.polygon_offsets is None or len(self.polygon_offsets) == 0:
            return np.zeros((0, 3), np.int32)
        o, c = int(self.polygon_offsets[i]), int(self.polygon_counts[i])
        return self.polygons[o : o + c]

    def sample_vertices(self, i: int) -> np.ndarray:
        if self.vertex_offsets is None or len(self.vertex_offsets) == 0:
            return np.zeros((0, 2), np.float32)
        o, c = int(self.vertex_offsets[i]), int(self.vertex_counts[i])
        return self.vertices[o : o + c]

    def sample_rles(self, i: int) -> list[tuple[int, np.ndarray]]:
        if self.mask_offsets is None or len(self.mask_offsets) == 0:
            return []
        o, c = int(self.mask_offsets[i]), int(self.mask_counts[i])
        return [(int(self.rle_objects[j]), self.rles[j][2]) for j in range(o, o + c)]


# --- JSON ---------------------------------------------------------------------------------------


def _bad(path: str, what: str) -> DecodeError:
    return DecodeError(f"{WHO}: annotations_file={path!r}: {what}")


def _int(value, path: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise _bad(path, f"{where} must be an integer, got {value!r}")
    return int(value)


def _load_json(path: str) -> dict:
    if not os.path.isfile(path):
        raise DataNotFoundError(f"{WHO}: annotations_file={path!r} does not exist")
    try:
        with open(path, "rb") as f:
            doc = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise _bad(path, f"not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise _bad(path, f"the top level must be an object, got {type(doc).__name__}")
    for key in ("images", "annotations", "categories"):
        if key in doc and not isinstance(doc[key], list):
            raise _bad(path, f"{key!r} must be a list, got {type(doc[key]).__name__}")
    return doc


def _categories(doc: dict, path: str) -> dict[int, int]:
    """Category id -> 1, 2, ... in file order (a repeated id keeps its first number, and the
    numbering still advances, as DALI's std::map::emplace does)."""
    mapping: dict[int, int] = {}
    new_id = 1
    for j, cat in enumerate(doc.get("categories", [])):
        if not isinstance(cat, dict):
            continue
        if "id" not in cat:
            raise _bad(path, f"categories[{j}] has no 'id'")
        mapping.setdefault(_int(cat["id"], path, f"categories[{j}].id"), new_id)
        new_id += 1
    return mapping


@dataclass
class _Object:
    category: int
    box: list[float]
    polygons: list[list[float]] | None  # None: not a polygon annotation
    rle: tuple[int, int, np.ndarray] | None


def _parse_rle(seg: dict, path: str, where: str) -> tuple[int, int, np.ndarray]:
    size = seg.get("size")
    if not isinstance(size, list) or len(size) < 2:
        raise _bad(path, f"{where}.segmentation: an RLE needs 'size': [height, width]")
    h, w = _int(size[0], path, f"{where}.size[0]"), _int(size[1], path, f"{where}.size[1]")
    if h <= 0 or w <= 0:
        raise _bad(path, f"{where}.segmentation: invalid mask size {size!r}")
    counts = seg.get("counts")
    if isinstance(counts, str) and counts:
        try:
            cnts = rle_from_string(counts)
        except ValueError as e:
            raise _bad(path, f"{where}.segmentation.counts: {e}") from None
    elif isinstance(counts, list) and counts:
        cnts = np.asarray([_int(c, path, f"{where}.counts") for c in counts], np.uint32)
    else:
        raise _bad(path, f"{where}.segmentation: missing or invalid 'counts'")
    if int(cnts.astype(np.int64).sum()) != h * w:
        raise _bad(path, f"{where}.segmentation: the RLE counts do not add up to {h}x{w} pixels")
    return h, w, cnts


def _objects(
    doc: dict,
    path: str,
    *,
    size_threshold: float,
    include_iscrowd: bool,
    polygons: bool,
    rles: bool,
) -> dict[int, list[_Object]]:
    """Kept objects by image id, in file order."""
    by_image: dict[int, list[_Object]] = {}
    for j, ann in enumerate(doc.get("annotations", [])):
        if not isinstance(ann, dict):
            continue
        where = f"annotations[{j}]"
        for key in ("image_id", "category_id", "bbox"):
            if key not in ann:
                raise _bad(path, f"{where} has no {key!r}")
        image_id = _int(ann["image_id"], path, f"{where}.image_id")
        category = _int(ann["category_id"], path, f"{where}.category_id")
        box = ann["bbox"]
        if not isinstance(box, list) or len(box) != 4:
            raise _bad(path, f"{where}.bbox must hold exactly 4 values, got {box!r}")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in box):
            raise _bad(path, f"{where}.bbox must hold numbers, got {box!r}")
        box = [float(np.float32(v)) for v in box]
        keep = include_iscrowd or _int(ann.get("iscrowd", 0), path, f"{where}.iscrowd") == 0
        if not (box[2] >= size_threshold and box[3] >= size_threshold):
            keep = False
        poly, rle = None, None
        seg = ann.get("segmentation")
        if polygons and isinstance(seg, list):
            poly = []
            for p, coords in enumerate(seg):
                if not isinstance(coords, list) or len(coords) % 2:
                    raise _bad(
                        path,
                        f"{where}.segmentation[{p}] must be a list of x, y pairs "
                        f"(an even number of values)",
                    )
                poly.append(coords)
        elif rles and isinstance(seg, dict):
            rle = _parse_rle(seg, path, where)
        if keep:
            by_image.setdefault(image_id, []).append(_Object(category, box, poly, rle))
    return by_image


def parse_json(
    path: str,
    *,
    images: list[str] | None = None,
    size_threshold: float = 0.1,
    include_iscrowd: bool = True,
    ltrb: bool = False,
    ratio: bool = False,
    skip_empty: bool = False,
    avoid_class_remapping: bool = False,
    polygon_masks: bool = False,
    pixelwise_masks: bool = False,
    image_ids: bool = False,
) -> CocoIndex:
    """Build the index from a COCO JSON file (see the module docstring).

    Raises:
        DataNotFoundError: the file does not exist.
        DecodeError: the file is not a COCO annotations file; the message says what is wrong.
    """
    doc = _load_json(path)
    segmentation = polygon_masks or pixelwise_masks
    infos: dict[str, dict] = {}
    listed: list[tuple[int, str]] = []
    for j, img in enumerate(doc.get("images", [])):
        if not isinstance(img, dict):
            continue
        for key in ("id", "file_name"):
            if key not in img:
                raise _bad(path, f"images[{j}] has no {key!r}")
        name = img["file_name"]
        if not isinstance(name, str):
            raise _bad(path, f"images[{j}].file_name must be a string, got {name!r}")
        info = {"id": _int(img["id"], path, f"images[{j}].id"), "where": f"images[{j}]"}
        for key in ("width", "height"):
            if key in img:
                info[key] = _int(img[key], path, f"images[{j}].{key}")
        infos[name] = info
        listed.append((info["id"], name))
    order = [name for _, name in sorted(listed, key=lambda x: x[0])] if images is None else images
    categories = _categories(doc, path)
    objects = _objects(
        doc,
        path,
        size_threshold=size_threshold,
        include_iscrowd=include_iscrowd,
        polygons=segmentation,
        rles=pixelwise_masks,
    )

    filenames: list[str] = []
    ids, offsets, counts = [], [], []
    boxes: list[list[float]] = []
    labels: list[int] = []
    polys: list[tuple[int, int, int]] = []
    verts: list[np.ndarray] = []
    poly_off, poly_cnt, vert_off, vert_cnt = [], [], [], []
    rles, rle_obj, mask_off, mask_cnt, heights, widths = [], [], [], [], [], []
    n_verts = 0
    for name in order:
        info = infos.get(name)
        if info is None:
            continue
        objs = objects.get(info["id"], [])
        if skip_empty and not objs:
            continue
        need_size = ratio or pixelwise_masks
        if need_size and ("width" not in info or "height" not in info):
            why = "ratio=True" if ratio else "pixelwise_masks=True"
            raise _bad(
                path, f"{info['where']} ({name!r}) has no width or height ({why} needs them)"
            )
        wd, ht = info.get("width", 1), info.get("height", 1)
        sample_polys, sample_verts0, sample_rles0 = len(polys), n_verts, len(rles)
        for k, obj in enumerate(objs):
            if avoid_class_remapping:
                labels.append(obj.category)
            elif obj.category in categories:
                labels.append(categories[obj.category])
            else:
                raise _bad(
                    path,
                    f"an annotation of image {info['id']} ({name!r}) has category_id="
                    f"{obj.category}, which 'categories' does not list",
                )
            x0, y0, bw, bh = obj.box
            box = [x0, y0, x0 + bw, y0 + bh] if ltrb else [x0, y0, bw, bh]
            box = np.float32(box)
            if ratio:
                box = box / np.float32([wd, ht, wd, ht])
            boxes.append(box)
            if obj.polygons is not None:
                for coords in obj.polygons:
                    v = np.asarray(coords, np.float32).reshape(-1, 2)
                    if ratio:
                        v = v / np.float32([wd, ht])
                    start = n_verts - sample_verts0
                    polys.append((k, start, start + len(v)))
                    verts.append(v)
                    n_verts += len(v)
            elif obj.rle is not None:
                rh, rw, cnts = obj.rle
                if (rh, rw) != (ht, wd):
                    raise _bad(
                        path,
                        f"an RLE mask of image {info['id']} ({name!r}) is {rh}x{rw}, "
                        f"but the image is {ht}x{wd}",
                    )
                rles.append(obj.rle)
                rle_obj.append(k)
        ids.append(info["id"])
        offsets.append(len(boxes) - len(objs))
        counts.append(len(objs))
        filenames.append(name)
        if segmentation:
            poly_off.append(sample_polys)
            poly_cnt.append(len(polys) - sample_polys)
            vert_off.append(sample_verts0)
            vert_cnt.append(n_verts - sample_verts0)
            if pixelwise_masks:
                mask_off.append(sample_rles0)
                mask_cnt.append(len(rles) - sample_rles0)
                heights.append(ht)
                widths.append(wd)

    index = CocoIndex(
        filenames=filenames,
        offsets=np.asarray(offsets, np.int64),
        counts=np.asarray(counts, np.int64),
        boxes=np.asarray(boxes, np.float32).reshape(-1, 4),
        labels=np.asarray(labels, np.int32),
        image_ids=np.asarray(ids, np.int32) if image_ids else None,
    )
    if segmentation:
        index.polygons = np.asarray(polys, np.int32).reshape(-1, 3)
        index.vertices = (
            np.concatenate(verts).astype(np.float32) if verts else np.zeros((0, 2), np.float32)
        )
        index.polygon_offsets = np.asarray(poly_off, np.int64)
        index.polygon_counts = np.asarray(poly_cnt, np.int64)
        index.vertex_offsets = np.asarray(vert_off, np.int64)
        index.vertex_counts = np.asarray(vert_cnt, np.int64)
    if pixelwise_masks:
        index.rles = rles
        index.rle_objects = np.asarray(rle_obj, np.int32)
        index.mask_offsets = np.asarray(mask_off, np.int64)
        index.mask_counts = np.asarray(mask_cnt, np.int64)
        index.heights = np.asarray(heights, np.int32)
        index.widths = np.asarray(widths, np.int32)
    return index


# --- DALI's preprocessed annotation files ------------------------------------------------------
#
# Each array is a file: a uint32 element count, then the elements (native byte order, as DALI
# writes them on little-endian machines). An empty array is not written at all, and a file
# that is absent reads as empty. ``filenames.dat`` is text, one file name a line. RLEs are,
# each, three uint64 (h, w, number of counts) and the uint32 counts.

_ARRAYS = {
    # name: (attribute, dtype, element shape)
    "offsets.dat": ("offsets", np.int32, ()),
    "boxes.dat": ("boxes", np.float32, (4,)),
    "labels.dat": ("labels", np.int32, ()),
    "counts.dat": ("counts", np.int32, ()),
}
_POLYGON_ARRAYS = {
    "polygon_data.dat": ("polygons", np.int32, (3,)),
    "polygon_offset.dat": ("polygon_offsets", np.int64, ()),
    "polygons_count.dat": ("polygon_counts", np.int64, ()),
    "vertices.dat": ("vertices", np.float32, (2,)),
    "vertices_offset.dat": ("vertex_offsets", np.int64, ()),
    "vertices_count.dat": ("vertex_counts", np.int64, ()),
}
_MASK_ARRAYS = {
    "masks_rles_idx.dat": ("rle_objects", np.int32, ()),
    "masks_offset.dat": ("mask_offsets", np.int64, ()),
    "mask_count.dat": ("mask_counts", np.int64, ()),
    "heights.dat": ("heights", np.int32, ()),
    "widths.dat": ("widths", np.int32, ()),
}
_IDS = {"original_ids.dat": ("image_ids", np.int32, ())}


def _count_unit(attr: str, shape: tuple) -> int:
    """Scalars per counted element: DALI keeps boxes as a flat float vector (the count is of
    floats), every other array as a vector of rows (ivec3, vec2) or scalars."""
    return 1 if attr == "boxes" else int(np.prod(shape, dtype=np.int64))


def _write_array(path: str, arr: np.ndarray, attr: str, dtype, shape: tuple) -> None:
    arr = np.ascontiguousarray(arr, dtype=dtype)
    if arr.size == 0:
        return
    with open(path, "wb") as f:
        f.write(struct.pack("<I", arr.size // _count_unit(attr, shape)))
        f.write(arr.tobytes())


def _read_array(path: str, attr: str, dtype, shape: tuple) -> np.ndarray:
    if not os.path.isfile(path):
        return np.zeros((0, *shape), dtype)
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4:
        raise DecodeError(f"{WHO}: {path!r} is truncated (no element count)")
    (n,) = struct.unpack_from("<I", data)
    scalars = n * _count_unit(attr, shape)
    nbytes = scalars * np.dtype(dtype).itemsize
    if len(data) - 4 < nbytes or scalars % int(np.prod(shape, dtype=np.int64)):
        raise DecodeError(
            f"{WHO}: {path!r} is truncated: it announces {n} elements ({nbytes} bytes) "
            f"but holds {len(data) - 4} bytes"
        )
    arr = np.frombuffer(data, dtype, count=scalars, offset=4).copy()
    return arr.reshape(-1, *shape) if shape else arr


def save_preprocessed(index: CocoIndex, path: str, polygons: bool, masks: bool) -> None:
    """Write ``index`` as DALI's ``save_preprocessed_annotations`` does, into directory ``path``."""
    if not os.path.isdir(path):
        raise DataNotFoundError(
            f"{WHO}: save_preprocessed_annotations_dir={path!r} is not a directory"
        )
    groups = [_ARRAYS]
    if polygons or masks:
        groups.append(_POLYGON_ARRAYS)
    if masks:
        groups.append(_MASK_ARRAYS)
    if index.image_ids is not None:
        groups.append(_IDS)
    for group in groups:
        for name, (attr, dtype, shape) in group.items():
            _write_array(os.path.join(path, name), getattr(index, attr), attr, dtype, shape)
    if masks and index.rles:
        with open(os.path.join(path, "masks_rles.dat"), "wb") as f:
            f.write(struct.pack("<I", len(index.rles)))
            for h, w, cnts in index.rles:
                f.write(struct.pack("<QQQ", h, w, len(cnts)))
                f.write(np.ascontiguousarray(cnts, np.uint32).tobytes())
    if index.filenames:
        with open(os.path.join(path, "filenames.dat"), "w", encoding="utf-8") as f:
            f.writelines(f"{name}\n" for name in index.filenames)


def _read_rles(path: str) -> list:
    if not os.path.isfile(path):
        return []
    with open(path, "rb") as f:
        data = f.read()
    out = []
    try:
        (n,) = struct.unpack_from("<I", data)
        pos = 4
        for _ in range(n):
            h, w, m = struct.unpack_from("<QQQ", data, pos)
            pos += 24
            if pos + 4 * m > len(data):
                raise struct.error("counts past the end")
            out.append((int(h), int(w), np.frombuffer(data, np.uint32, m, pos).copy()))
            pos += 4 * m
    except struct.error:
        raise DecodeError(f"{WHO}: {path!r} is truncated or not an RLE file") from None
    return out


def load_preprocessed(path: str, polygons: bool, masks: bool, image_ids: bool) -> CocoIndex:
    """Read DALI's preprocessed annotation files from directory ``path``.

    Raises:
        DataNotFoundError: ``path`` is not a directory or lacks ``filenames.dat``.
        DecodeError: a file is truncated or the files disagree; the message names the file.
    """
    if not os.path.isdir(path):
        raise DataNotFoundError(f"{WHO}: preprocessed_annotations={path!r} is not a directory")
    names_path = os.path.join(path, "filenames.dat")
    if not os.path.isfile(names_path):
        raise DataNotFoundError(f"{WHO}: {names_path!r} does not exist")
    with open(names_path, encoding="utf-8") as f:
        filenames = f.read().split()  # DALI reads whitespace-separated names
    groups = [_ARRAYS]
    if polygons or masks:
        groups.append(_POLYGON_ARRAYS)
    if masks:
        groups.append(_MASK_ARRAYS)
    if image_ids:
        groups.append(_IDS)
    values = {}
    for group in groups:
        for name, (attr, dtype, shape) in group.items():
            arr = _read_array(os.path.join(path, name), attr, dtype, shape)
            values[attr] = arr.astype(np.int64) if attr in ("offsets", "counts") else arr
    index = CocoIndex(filenames=filenames, **values)
    if masks:
        index.rles = _read_rles(os.path.join(path, "masks_rles.dat"))
    _check_index(index, path, polygons or masks, masks, image_ids)
    return index


def _check_index(index: CocoIndex, path: str, polygons: bool, masks: bool, ids: bool) -> None:
    """The preprocessed files must agree with each other (DALI would read out of bounds)."""
    n = len(index.filenames)

    def bad(name: str, what: str) -> DecodeError:
        return DecodeError(f"{WHO}: {os.path.join(path, name)!r}: {what}")

    for name, arr in (("offsets.dat", index.offsets), ("counts.dat", index.counts)):
        if len(arr) != n:
            raise bad(name, f"has {len(arr)} entries for {n} files in filenames.dat")
    if len(index.labels) != len(index.boxes):
        raise bad("labels.dat", f"has {len(index.labels)} labels for {len(index.boxes)} boxes")
    if n and ((index.offsets < 0).any() or (index.offsets + index.counts > len(index.boxes)).any()):
        raise bad("offsets.dat", f"points past the {len(index.boxes)} boxes of boxes.dat")
    if ids and len(index.image_ids) != n:
        raise bad("original_ids.dat", f"has {len(index.image_ids)} ids for {n} files")
    if polygons and len(index.polygon_offsets):
        for name, off, cnt, total in (
            ("polygon_offset.dat", index.polygon_offsets, index.polygon_counts, index.polygons),
            ("vertices_offset.dat", index.vertex_offsets, index.vertex_counts, index.vertices),
        ):
            if len(off) != n or len(cnt) != n or (off + cnt > len(total)).any():
                raise bad(name, "does not match filenames.dat and the data it indexes")
    if masks:
        if len(index.heights) != n or len(index.widths) != n:
            raise bad("heights.dat", "needs one height and one width a file")
        if (
            len(index.mask_offsets)
            and (index.mask_offsets + index.mask_counts > len(index.rles)).any()
        ):
            raise bad("masks_offset.dat", f"points past the {len(index.rles)} RLE masks")
        if len(index.rle_objects) != len(index.rles):
            raise bad("masks_rles_idx.dat", "needs one object index an RLE mask")


def check_images_arg(images) -> list[str] | None:
    if images is None:
        return None
    if isinstance(images, str):
        images = [images]
    images = list(images)
    if not all(isinstance(x, str) for x in images):
        raise ArgumentError(f"{WHO}: images={images!r} must be a list of file names")
    return images
