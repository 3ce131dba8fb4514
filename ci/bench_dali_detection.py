"""Side by side with NVIDIA DALI: the SSD training input pipelines of NVIDIA's examples (COCO
reader, random box crop, sliced decode, flips, colour, box encoder), run as written.

    python3 ci/bench_dali_detection.py --examples .ext [--only ssd-train,dali-ssd-train]
        [--rounds 2] [--epochs 3]

Cells (each needs ``--examples DIR``, the folder with the user files below; the files are not
part of this repository):

* ``ssd-train``: DeepLearningExamples' ``PyTorch/Detection/SSD/ssd/coco_pipeline.py``
  (``COCOPipeline`` read through its own ``DALICOCOIterator``), from
  ``DIR/dle_ssd_coco_pipeline.py``, built the way its ``ssd/data.py:get_train_loader`` does
  (default boxes from DLE's ``ssd/utils.py:dboxes300_coco``, read from
  ``DIR/dle_ssd_utils.py``; AMP on as ``main.py`` defaults, so float16 images; batch 128, the
  per-GPU batch of its multi-GPU recipes; 8 threads, its ``--num-workers`` default).
* ``dali-ssd-train``: DALI's ``docs/examples/use_cases/pytorch/single_stage_detector/src/
  coco_pipeline.py`` (``COCOPipeline``) through ``DALIGenericIterator`` as its ``src/data.py``
  wraps it (``last_batch_policy=FILL``), from ``DIR/dali_ssd_coco_pipeline.py``; batch 64,
  8 threads, float16 (its ``--fp16-mode`` default).
* ``ssd-train-cpu``, ``dali-ssd-train-cpu`` (not run unless named in ``--only``): the same two
  files with their GPU operators given ``device="cpu"``, the ``.gpu()`` copies and CUDA calls
  taken out, ``device_id=None``: a check of both libraries on a machine without a GPU.

The data: ``prepare`` writes a COCO-format set next to ``--data`` (``<parent>/coco-like``):
``min(--images, 5000)`` photo-like JPEGs (``bench_gpu.ensure_dataset``) under ``train2017/``
and ``annotations/instances_train2017.json`` with 1-8 random boxes per image, COCO's sparse
category ids, some crowd boxes (with an RLE mask) and some images without any box (which the
pipelines' ``skip_empty=True`` leaves out).
"""

from __future__ import annotations

import ast
import json
import os
import sys
import tempfile
import types as pytypes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dali  # noqa: E402

# name -> (program, batch, threads, on the GPU)
CELLS = {
    "ssd-train": ("dle", 128, 8, True),
    "dali-ssd-train": ("dali_example", 64, 8, True),
    "ssd-train-cpu": ("dle", 16, 2, False),
    "dali-ssd-train-cpu": ("dali_example", 16, 2, False),
}
DEFAULT_CELLS = ["ssd-train", "dali-ssd-train"]
DLE_PIPELINE = "dle_ssd_coco_pipeline.py"
DLE_UTILS = "dle_ssd_utils.py"
DALI_PIPELINE = "dali_ssd_coco_pipeline.py"
MAX_IMAGES = 5000
# COCO's 80 category ids: 1..90 with gaps
CATEGORY_IDS = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]
# what turns a file's GPU graph into the same graph on the CPU (the *-cpu cells)
CPU_SWAPS = (
    ('device="gpu"', 'device="cpu"'),
    (".gpu()", ""),
    ("torch.cuda.synchronize()", "None"),
    ("torch.device('cuda', dev_id)", "torch.device('cpu')"),
)


# --- the data -----------------------------------------------------------------------------------


def coco_root(args) -> str:
    return os.path.join(os.path.dirname(os.path.normpath(args.data)), "coco-like")


def coco_files(args) -> tuple[str, str]:
    root = coco_root(args)
    return (
        os.path.join(root, "train2017"),
        os.path.join(root, "annotations", "instances_train2017.json"),
    )


def prepare(args) -> None:
    """The COCO-format set (once): JPEGs in class folders, an instances file around them."""
    from bench_gpu import ensure_dataset, list_files

    images, annotations = coco_files(args)
    if os.path.exists(annotations):
        return
    ensure_dataset(images, min(args.images, MAX_IMAGES))
    coco = make_annotations(images, list_files(images))
    os.makedirs(os.path.dirname(annotations), exist_ok=True)
    with open(annotations + ".part", "w") as f:
        json.dump(coco, f)
    os.rename(annotations + ".part", annotations)  # complete or absent


def make_annotations(root: str, files: list[str], seed: int = 2024) -> dict:
    """COCO instances for ``files`` (paths under ``root``): 1-8 boxes per image, none for about
    one image in ten; about one box in thirty a crowd (iscrowd=1, an RLE mask) and the others
    with a polygon; sparse image and category ids, as COCO has them."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    images, anns = [], []
    for i, path in enumerate(files):
        with Image.open(path) as im:
            w, h = im.size
        image_id = 100_000 + 7 * i
        images.append(
            {"id": image_id, "file_name": os.path.relpath(path, root), "width": w, "height": h}
        )
        for _ in range(0 if rng.random() < 0.1 else int(rng.integers(1, 9))):
            bw, bh = w * rng.uniform(0.05, 0.8), h * rng.uniform(0.05, 0.8)
            x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            crowd = bool(rng.random() < 1 / 30)
            ann = {
                "id": len(anns) + 1,
                "image_id": image_id,
                "category_id": int(rng.choice(CATEGORY_IDS)),
                "bbox": [round(v, 2) for v in (x, y, bw, bh)],
                "area": round(bw * bh, 2),
                "iscrowd": int(crowd),
            }
            if crowd:
                ann["segmentation"] = {"counts": box_rle(x, y, bw, bh, h, w), "size": [h, w]}
            else:
                ann["segmentation"] = [
                    [round(v, 2) for v in (x, y, x + bw, y, x + bw, y + bh, x, y + bh)]
                ]
            anns.append(ann)
    categories = [{"id": c, "name": f"class{c}", "supercategory": "thing"} for c in CATEGORY_IDS]
    return {"images": images, "annotations": anns, "categories": categories}


def box_rle(x: float, y: float, bw: float, bh: float, h: int, w: int) -> list[int]:
    """COCO's uncompressed RLE of a box's mask: run lengths of 0s and 1s, column-major."""
    x0, y0 = int(x), int(y)
    x1, y1 = min(w, int(x + bw) + 1), min(h, int(y + bh) + 1)
    counts, zeros = [], x0 * h + y0  # the columns left of the box, then the top of its first
    for c in range(x0, x1):
        counts += [zeros, y1 - y0]
        zeros = h - y1 + (y0 if c + 1 < x1 else 0)  # below the box, then above it in the next
    counts.append(zeros + (w - x1) * h)
    return counts


# --- the user files -----------------------------------------------------------------------------


def load_user_file(args, name: str, defs: list[str], gpu: bool, assigns=()) -> dict:
    """``defs`` (functions, classes) and the top-level assignments ``assigns`` of the user file
    ``name`` in ``--examples``, imports ported for ``args.lib`` (``bench_dali.load_defs``); for
    the CPU cells, from a copy with ``CPU_SWAPS`` made."""
    path = os.path.join(args.examples, name)
    with open(path) as f:
        source = f.read()
    if not gpu:
        for old, new in CPU_SWAPS:
            source = source.replace(old, new)
        path = os.path.join(tempfile.mkdtemp(prefix="bench-det-"), name)
        with open(path, "w") as f:
            f.write(source)
    ns = bench_dali.load_defs(path, defs, args.lib)
    # load_defs keeps definitions only; DLE's iterator also needs its ``to_torch_type`` table
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in assigns for t in node.targets
        ):
            exec(compile(ast.Module([node], []), path, "exec"), ns)
    return ns


def default_boxes(args):
    """DLE's ``dboxes300_coco()`` (its ``ssd/utils.py``; the file's torchvision and PIL imports
    are not needed by it)."""
    ns = load_user_file(args, DLE_UTILS, ["DefaultBoxes", "dboxes300_coco"], gpu=True)
    return ns["dboxes300_coco"]()


class LtrbList:
    """What DALI's example passes as ``default_boxes``: its ``src/utils.py`` ``DefaultBoxes``
    has the same 8732 boxes as DLE's and ``as_ltrb_list()``, written here as there."""

    def __init__(self, dboxes):
        self.dboxes_ltrb = dboxes(order="ltrb")

    def as_ltrb_list(self):
        return [x for x in self.dboxes_ltrb.view(-1).numpy()]


class Epochs:
    """One pass of ``for data in it`` per epoch over an iterator that is not re-iterable: the
    epoch loop of DLE's ``main.py`` (its iterator, then ``train_loader.reset()``)."""

    def __init__(self, it):
        self.it = it

    def __iter__(self):
        yield from self.it
        self.it.reset()


# --- the child: one cell, one library -----------------------------------------------------------


def child(args) -> None:
    program, batch, threads, gpu = CELLS[args.cell]
    if gpu and args.gpus > 1:
        raise SystemExit("the SSD cells run on one GPU")
    file_root, annotations = coco_files(args)
    dboxes = default_boxes(args)
    if program == "dle":
        pipe, it, use = dle_ssd(args, batch, threads, gpu, file_root, annotations, dboxes)
    else:
        pipe, it, use = dali_example_ssd(args, batch, threads, gpu, file_root, annotations, dboxes)
    bench_dali.measure(args, pipe, it, use, batch, on_gpu=gpu)
    if args.lib == "dali" and program == "dle":
        # DALI 2.4 queues two more iterations at every _prefetch() DLE's iterator calls before
        # each batch (dlpipe's tops the queue up to its depth): they run one after another, so
        # the rate is not changed, but by now two iterations a batch are waiting, which DALI
        # would run (and hold on the GPU) at exit. The cell is measured: leave without that.
        sys.stdout.flush()
        os._exit(0)


def dle_ssd(args, batch, threads, gpu, file_root, annotations, dboxes):
    """DLE's ``get_train_loader``: the pipeline, built, one test run, its iterator."""
    ns = load_user_file(
        args,
        DLE_PIPELINE,
        ["COCOPipeline", "DALICOCOIterator", "feed_ndarray"],
        gpu,
        assigns=("to_torch_type",),
    )
    pipe = ns["COCOPipeline"](
        batch_size=batch,
        file_root=file_root,
        annotations_file=annotations,
        default_boxes=dboxes,
        device_id=0 if gpu else None,
        num_shards=1,
        output_fp16=True,  # main.py's --amp default
        output_nhwc=False,
        pad_output=False,
        num_threads=threads,
        seed=1234,
    )
    pipe.build()
    _test_run = pipe.schedule_run(), pipe.share_outputs(), pipe.release_outputs()
    it = ns["DALICOCOIterator"](pipe, pipe.epoch_size("Reader"))

    def use(data):
        # DLE's train_loop: img = data[0][0][0], bbox = data[0][1][0], label = data[0][2][0]
        img, bbox, label, offsets = data[0][0][0], data[0][1][0], data[0][2][0], data[0][3][0]
        n = img.shape[0]
        assert img.shape == (n, 3, 300, 300), img.shape
        assert bbox.shape == (n * 8732, 4) and label.shape == (n * 8732,), (bbox.shape, n)
        assert int(offsets[-1]) == n * 8732 and str(img.dtype) == "torch.float16", img.dtype
        value = img.view(n, -1)[:, 0].float().sum() + bbox[:, 2].sum() + label.long().sum()
        return n, value

    return pipe, Epochs(it), use


def dali_example_ssd(args, batch, threads, gpu, file_root, annotations, dboxes):
    """DALI's example ``get_train_dali_loader``: its pipeline, ``DALIGenericIterator``."""
    if args.lib == "dali":
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    else:
        from dlpipe.plugins.pytorch import DALIGenericIterator, LastBatchPolicy
    ns = load_user_file(args, DALI_PIPELINE, ["COCOPipeline"], gpu)
    no_process_group_error()
    example_args = pytypes.SimpleNamespace(
        batch_size=batch,
        local_rank=0 if gpu else None,
        num_workers=threads,
        train_coco_root=file_root,
        train_annotate=annotations,
        fp16=True,  # the example's --fp16-mode default
    )
    pipe = ns["COCOPipeline"](LtrbList(dboxes), example_args, seed=1234)
    it = DALIGenericIterator(
        pipe,
        ["images", "boxes", "labels"],
        reader_name="Reader",
        last_batch_policy=LastBatchPolicy.FILL,
    )

    def use(data):
        img, bbox, label = data[0]["images"], data[0]["boxes"], data[0]["labels"]
        n = img.shape[0]
        assert bbox.shape == (n, 8732, 4) and label.shape == (n, 8732), (bbox.shape, n)
        assert img.shape == (n, 3, 300, 300) and str(img.dtype) == "torch.float16", img.dtype
        return n, img.view(n, -1)[:, 0].float().sum() + bbox[..., 2].sum() + label.long().sum()

    return pipe, Epochs(it), use


def no_process_group_error() -> None:
    """DALI's example asks ``torch.distributed`` for its shard and takes ``RuntimeError`` for
    "no process group" (a single-process run), as torch raised it before 2.x; torch now raises
    ``ValueError``. Without a process group, get_rank / get_world_size raise RuntimeError here
    again, so the example runs as written."""
    import torch.distributed as dist

    if dist.is_initialized():
        return

    def no_group(*_args, **_kwargs):
        raise RuntimeError("Default process group has not been initialized")

    dist.get_rank = dist.get_world_size = no_group


SUITE = bench_dali.Suite(
    script=__file__,
    cells=DEFAULT_CELLS,
    child=child,
    prepare=prepare,
    description=__doc__.split("\n")[0],
    example_cells=frozenset(CELLS),
    single_gpu_cells=frozenset(CELLS),  # the files take their shard from torch.distributed
)

if __name__ == "__main__":
    bench_dali.main(SUITE)
