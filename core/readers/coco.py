"""``fn.readers.coco``: images and their object annotations from a COCO data set (DALI's
``readers.coco``, also ``ops.COCOReader``, ``ops.readers.COCO`` and ``fn.coco_reader``)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError
from ..graph import OpNode, register
from ._coco_annotations import (
    CocoIndex,
    check_images_arg,
    load_preprocessed,
    parse_json,
    save_preprocessed,
)
from ._coco_masks import label_mask
from ._sharding import ListSharding
from .file import FileReader, read_file

WHO = "readers.coco"

# Arguments DALI refuses with ``preprocessed_annotations`` (they shaped the saved index).
_JSON_ONLY = ("annotations_file", "skip_empty", "ratio", "ltrb", "images", "size_threshold")


@register(legacy=("COCOReader",))
class CocoReader(FileReader):
    """Reads a COCO data set: encoded images and, per image, its objects' boxes and labels (and,
    on request, polygon or pixelwise masks and the image ids).

    Outputs, in order: ``images`` (1-D uint8, the file's bytes), ``bboxes`` (M, 4) float32
    ([x, y, w, h], or [l, t, r, b] with ``ltrb``; relative to the image size with ``ratio``),
    ``labels`` (M,) int32, then ``polygons`` (P, 3) int32 [object, first vertex, end vertex] and
    ``vertices`` (V, 2) float32 with ``polygon_masks``, or ``pixelwise_masks`` (H, W, 1) int32
    (layout HWC) with ``pixelwise_masks``, then ``image_ids`` (1,) int32 with ``image_ids``.

    The annotations come from ``annotations_file`` (COCO JSON; how it becomes samples is
    described in ``readers/_coco_annotations.py``) or from a directory of files written by
    ``save_preprocessed_annotations`` (``preprocessed_annotations``; DALI's binary format, so
    files DALI wrote load here and the other way round). Images are read from ``file_root``.
    Sharding, shuffling, padding, reader metadata and checkpoints are the file reader's
    (``readers/_sharding.py``).

    Args:
        file_root: the directory the annotations' ``file_name`` s are relative to.
        annotations_file: the COCO JSON file.
        preprocessed_annotations: a directory of preprocessed annotations (instead of
            ``annotations_file``; ``meta_files_path`` is its deprecated name).
        ltrb: boxes as [l, t, r, b] instead of [x, y, w, h]. Default False.
        ratio: box and vertex coordinates divided by the image width and height. Default False.
        size_threshold: objects whose box is narrower or lower than this (pixels) are left out.
            Default 0.1.
        skip_empty: leave out images without objects. Default False.
        include_iscrowd: keep objects marked ``iscrowd``. Default True.
        avoid_class_remapping: labels are the category ids as they are in the file, not
            1..K in the order of ``categories``. Default False.
        polygon_masks: add the ``polygons`` and ``vertices`` outputs (``masks`` is the
            deprecated spelling, whose vertex indices count coordinates, twice as many).
        pixelwise_masks: add the ``pixelwise_masks`` output (exclusive with polygon masks).
        image_ids: add the ``image_ids`` output (``save_img_ids`` is the deprecated name).
        images: read only these files, in this order (duplicates read twice).
        save_preprocessed_annotations, save_preprocessed_annotations_dir: write the parsed
            annotations into that directory when the graph is built (deprecated names
            ``dump_meta_files``, ``dump_meta_files_path``).
        shard_id, num_shards, random_shuffle, initial_fill, stick_to_shard, pad_last_batch,
            shuffle_after_epoch, shuffle_after_epoch_seed: as in ``fn.readers.file``.
        read_ahead, dont_use_mmap, lazy_init, prefetch_queue_depth, tensor_init_bytes: accepted
            for DALI scripts; they change nothing here.

    Example:
        >>> images, bboxes, labels = fn.readers.coco(
        ...     file_root="/data/coco/train2017",
        ...     annotations_file="/data/coco/annotations/instances_train2017.json",
        ...     ltrb=True, ratio=True, skip_empty=True, random_shuffle=True, name="Reader")
    """

    schema = "readers.coco"
    ops_name = "COCO"
    num_outputs = 3

    def setup(
        self,
        *,
        file_root: str | None = None,
        annotations_file: str | None = None,
        preprocessed_annotations: str | None = None,
        meta_files_path: str | None = None,
        ltrb: bool | None = None,
        ratio: bool | None = None,
        size_threshold: float | None = None,
        skip_empty: bool | None = None,
        include_iscrowd: bool = True,
        avoid_class_remapping: bool = False,
        polygon_masks: bool = False,
        masks: bool = False,
        pixelwise_masks: bool = False,
        image_ids: bool = False,
        save_img_ids: bool = False,
        images: Sequence[str] | None = None,
        save_preprocessed_annotations: bool | None = None,
        save_preprocessed_annotations_dir: str | None = None,
        dump_meta_files: bool | None = None,
        dump_meta_files_path: str | None = None,
        shard_id: int = 0,
        num_shards: int = 1,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        shuffle_after_epoch: bool = False,
        shuffle_after_epoch_seed: int | None = None,
        stick_to_shard: bool | None = None,
        pad_last_batch: bool = False,
        prefetch_queue_depth: int = 1,
        read_ahead: bool = False,
        dont_use_mmap: bool = False,
        lazy_init: bool = False,
        skip_cached_images: bool = False,
        tensor_init_bytes: int = 1048576,
    ) -> None:
        preprocessed = preprocessed_annotations or meta_files_path
        given = {
            "annotations_file": annotations_file,
            "skip_empty": skip_empty,
            "ratio": ratio,
            "ltrb": ltrb,
            "images": images,
            "size_threshold": size_threshold,
        }
        if preprocessed:
            for name in _JSON_ONLY:
                if given[name] is not None:
                    raise ArgumentError(
                        f"{WHO}: {name}={given[name]!r} cannot be used when reading "
                        f"preprocessed_annotations={preprocessed!r}"
                    )
        elif not annotations_file:
            raise ArgumentError(f"{WHO}: give annotations_file= or preprocessed_annotations=")
        if file_root is None:
            raise ArgumentError(f"{WHO}: file_root= is required (the images' directory)")
        if skip_cached_images:
            raise ArgumentError(f"{WHO}: skip_cached_images=True is not supported")
        self.polygon_masks = bool(polygon_masks or masks)
        self.legacy_polygons = bool(masks)
        self.pixelwise_masks = bool(pixelwise_masks)
        self.image_ids = bool(image_ids or save_img_ids)
        if self.polygon_masks and self.pixelwise_masks:
            raise ArgumentError(
                f"{WHO}: pixelwise_masks=True and polygon_masks=True are mutually exclusive"
            )
        save = save_preprocessed_annotations or dump_meta_files
        save_dir = save_preprocessed_annotations_dir or dump_meta_files_path
        if bool(save) != bool(save_dir):
            raise ArgumentError(
                f"{WHO}: save_preprocessed_annotations={save!r} and "
                f"save_preprocessed_annotations_dir={save_dir!r} go together"
            )
        threshold = 0.1 if size_threshold is None else size_threshold
        if not isinstance(threshold, int | float) or isinstance(threshold, bool):
            raise ArgumentError(f"{WHO}: size_threshold={threshold!r} must be a number")

        if preprocessed:
            index = load_preprocessed(
                preprocessed, self.polygon_masks, self.pixelwise_masks, self.image_ids
            )
        else:
            index = parse_json(
                annotations_file,
                images=check_images_arg(images),
                size_threshold=float(np.float32(threshold)),
                include_iscrowd=bool(include_iscrowd),
                ltrb=bool(ltrb),
                ratio=bool(ratio),
                skip_empty=bool(skip_empty),
                avoid_class_remapping=bool(avoid_class_remapping),
                polygon_masks=self.polygon_masks,
                pixelwise_masks=self.pixelwise_masks,
                image_ids=self.image_ids,
            )
        if save:
            save_preprocessed(index, save_dir, self.polygon_masks, self.pixelwise_masks)
        if len(index) == 0:
            source = preprocessed or annotations_file
            raise ArgumentError(f"{WHO}: No files found: {source!r} lists no images to read")
        self.index: CocoIndex = index
        self.num_outputs = (
            3 + 2 * self.polygon_masks + self.pixelwise_masks + self.image_ids
        )  # the instance's count: outputs depend on the arguments
        self.files = index.filenames
        self.paths = [os.path.join(file_root, f) for f in index.filenames]
        self.labels = np.arange(len(index), dtype=np.int32)  # the file reader's "label"
        self._init_reading()
        self.loader = ListSharding(
            len(index),
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=random_shuffle,
            initial_fill=initial_fill,
            shuffle_after_epoch=shuffle_after_epoch,
            shuffle_after_epoch_seed=shuffle_after_epoch_seed,
            stick_to_shard=stick_to_shard,
            pad_last_batch=pad_last_batch,
            who=f"{WHO} {self.name or ''}".strip(),
        )

    def output_layouts(self, input_layouts):
        layouts = [""] * self.num_outputs
        if self.pixelwise_masks:
            layouts[3] = "HWC"
        return layouts

    def batch_level_in(self, node: OpNode) -> bool:
        # Rasterising masks is real work: spread it over the thread pool, a sample each.
        return not self.pixelwise_masks

    def annotations(self, i: int) -> list[np.ndarray]:
        """The annotation outputs of sample ``i`` (fresh arrays: consumers may write them)."""
        index = self.index
        out = [index.sample_boxes(i).copy(), index.sample_labels(i).copy()]
        if self.polygon_masks:
            polygons = index.sample_polygons(i).copy()
            if self.legacy_polygons:
                polygons[:, 1:] *= 2
            out += [polygons, index.sample_vertices(i).copy()]
        if self.pixelwise_masks:
            out.append(
                label_mask(
                    int(index.heights[i]),
                    int(index.widths[i]),
                    index.sample_labels(i),
                    index.sample_polygons(i),
                    index.sample_vertices(i),
                    index.sample_rles(i),
                )
            )
        if self.image_ids:
            out.append(index.image_ids[i : i + 1].copy())
        return out

    def run_batch_cpu(self, inputs, args, params):
        images, _ = super().run_batch_cpu(inputs, args, params)
        per_sample = [self.annotations(p) for p in params]
        return [images, *([s[k] for s in per_sample] for k in range(self.num_outputs - 1))]

    def run_sample(self, inputs, args, param):
        return (read_file(self.paths[param]), *self.annotations(param))


@register
class CocoReaderAlias(CocoReader):
    """Legacy alias of :class:`CocoReader` (``fn.coco_reader``), kept for old DALI scripts."""

    schema = "coco_reader"
    ops_name = "COCOReader"
