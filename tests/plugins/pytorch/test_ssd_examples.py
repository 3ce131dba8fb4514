"""The SSD training pipelines of NVIDIA's examples, run on a tiny COCO set made here.

Two programs are mirrored call for call (the same operators, arguments and order; the class
layout of the ``ops`` API they use), written here rather than copied:

* DALI's ``docs/examples/use_cases/pytorch/single_stage_detector/src/coco_pipeline.py``
  (``ops.COCOReader`` -> ``ImageDecoder`` -> ``RandomBBoxCrop`` -> ``Slice`` -> ``Flip``/
  ``BbFlip`` -> ``Resize`` -> ``Hsv``/``BrightnessContrast`` -> ``CropMirrorNormalize`` ->
  ``BoxEncoder``), read through ``DALIGenericIterator``;
* DeepLearningExamples' ``PyTorch/Detection/SSD/ssd/coco_pipeline.py`` (``readers.COCO`` ->
  ``decoders.ImageSlice`` driven by the crop window ...), read through its own iterator, whose
  steps (``_prefetch``, ``share_outputs``, ``as_tensor().shape()``, per-sample ``shape()``,
  ``types.to_numpy_type``, ``copy_to_external`` through a ctypes pointer) are reproduced.

Each runs as the example has it on a GPU (marker ``gpu``) and, on the CPU, with its GPU
operators given ``device="cpu"`` and the ``.gpu()`` copies left out. A test is skipped, naming
what is missing, while an operator it needs (``slice``, ``decoders.image_slice``,
``types.to_numpy_type``, owned by other helpers) is not in the registry yet. The detection
chain without ``slice`` runs today.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import math
import os

import cv2
import numpy as np
import pytest

from conftest import HAS_GPU
from dlpipe import Pipeline, ops, types
from dlpipe.graph import REGISTRY
from dlpipe.synthetic import synthetic_image

torch = pytest.importorskip("torch")
torch_plugin = pytest.importorskip("dlpipe.plugins.pytorch")
pytestmark = pytest.mark.torch

from dlpipe.plugins.pytorch import DALIGenericIterator  # noqa: E402


def require(*schemas: str, to_numpy_type: bool = False) -> None:
    missing = [s for s in schemas if s not in REGISTRY]
    if to_numpy_type and not hasattr(types, "to_numpy_type"):
        missing.append("types.to_numpy_type")
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (another helper's part, not merged yet)")


# --- a tiny COCO set -----------------------------------------------------------------------------

CATEGORIES = [1, 18, 44]  # sparse ids: labels 1..3


@pytest.fixture(scope="module")
def tiny_coco(tmp_path_factory):
    """12 JPEGs of 60-140 px with 0-4 objects each (one image without any, one crowd)."""
    root = str(tmp_path_factory.mktemp("coco"))
    rng = np.random.default_rng(0)
    images, anns = [], []
    for i in range(12):
        h, w = (int(v) for v in rng.integers(60, 140, 2))
        name = f"{i:012d}.jpg"
        img = synthetic_image(rng, h, w)
        cv2.imwrite(os.path.join(root, name), img[..., ::-1])
        images.append({"id": 100 + i, "file_name": name, "width": w, "height": h})
        for _ in range(0 if i == 5 else int(rng.integers(1, 5))):
            bw, bh = rng.uniform(0.15, 0.6) * w, rng.uniform(0.15, 0.6) * h
            x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": 100 + i,
                    "category_id": int(rng.choice(CATEGORIES)),
                    "bbox": [x, y, bw, bh],
                    "iscrowd": int(i == 3),
                    "area": bw * bh,
                }
            )
    ann = os.path.join(root, "instances.json")
    with open(ann, "w") as f:
        json.dump(
            {"images": images, "annotations": anns, "categories": [{"id": c} for c in CATEGORIES]},
            f,
        )
    return root, ann


class DefaultBoxes:
    """SSD300's 8732 default boxes (feature maps 38..1, two sizes and 2 or 4 aspect ratios per
    cell), clipped to [0, 1]: what the examples pass as ``anchors``."""

    def __init__(self, fig=300, feat=(38, 19, 10, 5, 3, 1), steps=(8, 16, 32, 64, 100, 300)):
        scales = (21, 45, 99, 153, 207, 261, 315)
        ratios = ((2,), (2, 3), (2, 3), (2, 3), (2,), (2,))
        boxes = []
        for k, f in enumerate(feat):
            s1, s2 = scales[k] / fig, scales[k + 1] / fig
            sizes = [(s1, s1), (math.sqrt(s1 * s2),) * 2]
            for r in ratios[k]:
                sizes += [
                    (s1 * math.sqrt(r), s1 / math.sqrt(r)),
                    (s1 / math.sqrt(r), s1 * math.sqrt(r)),
                ]
            fk = fig / steps[k]
            for (w, h), (i, j) in itertools.product(sizes, itertools.product(range(f), repeat=2)):
                cx, cy = (j + 0.5) / fk, (i + 0.5) / fk
                boxes.append((cx, cy, w, h))
        b = np.clip(np.asarray(boxes, np.float64), 0, 1)
        self.ltrb = np.concatenate([b[:, :2] - b[:, 2:] / 2, b[:, :2] + b[:, 2:] / 2], axis=1)

    def as_ltrb_list(self) -> list[float]:
        return self.ltrb.reshape(-1).tolist()


DBOXES = DefaultBoxes()
NUM_ANCHORS = len(DBOXES.ltrb)


# --- DALI's SSD example, its graph as written there ---------------------------------------------


class DaliSSDPipeline(Pipeline):
    """The graph of DALI's single_stage_detector ``COCOPipeline``; ``gpu=False`` gives its GPU
    operators ``device="cpu"`` and leaves the ``.gpu()`` copies out."""

    def __init__(self, root, ann, default_boxes, batch_size, num_threads, seed, gpu):
        super().__init__(
            batch_size=batch_size, device_id=0 if gpu else None, num_threads=num_threads, seed=seed
        )
        dev = "gpu" if gpu else "cpu"
        self.gpu_output = gpu
        self.input = ops.COCOReader(
            file_root=root,
            annotations_file=ann,
            skip_empty=True,
            shard_id=0,
            num_shards=1,
            ratio=True,
            ltrb=True,
            random_shuffle=False,
            shuffle_after_epoch=True,
            pad_last_batch=True,
        )
        self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)
        self.crop = ops.RandomBBoxCrop(
            device="cpu",
            aspect_ratio=[0.5, 2.0],
            thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
            scaling=[0.3, 1.0],
            ltrb=True,
            allow_no_crop=True,
            num_attempts=1,
        )
        # (the chain test below runs without slice while it is not merged)
        self.slice = ops.Slice(device="cpu") if "slice" in REGISTRY else None
        self.hsv = ops.Hsv(device=dev, dtype=types.FLOAT)
        self.bc = ops.BrightnessContrast(device=dev, contrast_center=128, dtype=types.UINT8)
        self.resize = ops.Resize(
            device="cpu",
            resize_x=300,
            resize_y=300,
            min_filter=types.DALIInterpType.INTERP_TRIANGULAR,
        )
        self.normalize = ops.CropMirrorNormalize(
            device=dev,
            crop=(300, 300),
            mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
            std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
            mirror=0,
            output_dtype=types.FLOAT,
            output_layout=types.NCHW,
            pad_output=False,
        )
        self.rng1 = ops.Uniform(range=[0.5, 1.5])
        self.rng2 = ops.Uniform(range=[0.875, 1.125])
        self.rng3 = ops.Uniform(range=[-0.5, 0.5])
        self.flip = ops.Flip(device="cpu")
        self.bbflip = ops.BbFlip(device="cpu", ltrb=True)
        self.flip_coin = ops.CoinFlip(probability=0.5)
        self.box_encoder = ops.BoxEncoder(
            device="cpu", criteria=0.5, anchors=default_boxes.as_ltrb_list()
        )

    def define_graph(self):
        saturation = self.rng1()
        contrast = self.rng1()
        brightness = self.rng2()
        hue = self.rng3()
        coin_rnd = self.flip_coin()
        inputs, bboxes, labels = self.input(name="Reader")
        images = self.decode(inputs)
        crop_begin, crop_size, bboxes, labels = self.crop(bboxes, labels)
        images = self.slice(images, crop_begin, crop_size)
        images = self.flip(images, horizontal=coin_rnd)
        bboxes = self.bbflip(bboxes, horizontal=coin_rnd)
        images = self.resize(images)
        if self.gpu_output:
            images = images.gpu()
        images = self.hsv(images, hue=hue, saturation=saturation)
        images = self.bc(images, brightness=brightness, contrast=contrast)
        images = self.normalize(images)
        bboxes, labels = self.box_encoder(bboxes, labels)
        if self.gpu_output:
            return images, bboxes.gpu(), labels.gpu()
        return images, bboxes, labels


def check_ssd_batch(images, boxes, labels, batch_size, dtype=torch.float32):
    assert images.shape == (batch_size, 3, 300, 300) and images.dtype == dtype
    assert boxes.shape == (batch_size, NUM_ANCHORS, 4) and boxes.dtype == torch.float32
    assert labels.shape == (batch_size, NUM_ANCHORS) and labels.dtype == torch.int32
    labels = labels.cpu().numpy()
    assert set(np.unique(labels)) <= {0, 1, 2, 3}
    assert (labels > 0).any(axis=1).all()  # every sample keeps a box, matched to an anchor
    cwh = boxes.cpu().numpy()[labels > 0]
    assert (cwh[:, 2:] > 0).all() and (cwh[:, :2] >= 0).all() and (cwh[:, :2] <= 1).all()


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_dali_ssd_example(tiny_coco, gpu):
    require("slice")
    root, ann = tiny_coco
    pipe = DaliSSDPipeline(root, ann, DBOXES, batch_size=4, num_threads=2, seed=1, gpu=gpu)
    it = DALIGenericIterator(
        pipe, ["images", "boxes", "labels"], reader_name="Reader", auto_reset=True
    )
    for _ in range(2):  # epochs of 11 images (skip_empty drops one): 3 batches, padded
        n = 0
        for (batch,) in it:
            check_ssd_batch(batch["images"], batch["boxes"], batch["labels"], 4)
            n += 1
        assert n == 3


# --- DeepLearningExamples' SSD pipeline and iterator --------------------------------------------


class DleSSDPipeline(Pipeline):
    """The graph of DeepLearningExamples' SSD ``COCOPipeline``; ``gpu=False`` as above."""

    def __init__(self, root, ann, default_boxes, batch_size, num_threads, seed, gpu):
        super().__init__(
            batch_size=batch_size, device_id=0 if gpu else None, num_threads=num_threads, seed=seed
        )
        dev = "gpu" if gpu else "cpu"
        self.gpu_output = gpu
        self.input = ops.readers.COCO(
            file_root=root,
            annotations_file=ann,
            shard_id=0,
            num_shards=1,
            ratio=True,
            ltrb=True,
            shuffle_after_epoch=True,
            skip_empty=True,
        )
        self.decode_slice = ops.decoders.ImageSlice(device="cpu", output_type=types.RGB)
        self.crop = ops.RandomBBoxCrop(
            device="cpu",
            aspect_ratio=[0.5, 2.0],
            thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
            scaling=[0.3, 1.0],
            bbox_layout="xyXY",
            allow_no_crop=True,
            num_attempts=1,
        )
        self.hsv = ops.Hsv(device=dev, dtype=types.FLOAT)
        self.bc = ops.BrightnessContrast(device=dev, contrast_center=128, dtype=types.UINT8)
        self.normalize = ops.CropMirrorNormalize(
            device=dev,
            crop=(300, 300),
            mean=[0.0, 0.0, 0.0],
            std=[255.0, 255.0, 255.0],
            mirror=0,
            dtype=types.FLOAT,
            output_layout=types.NCHW,
            pad_output=False,
        )
        self.flip = ops.Flip(device="cpu")
        self.bbflip = ops.BbFlip(device="cpu", ltrb=True)
        self.resize = ops.Resize(device="cpu", resize_x=300, resize_y=300)
        self.rng1 = ops.random.Uniform(range=[0.5, 1.5])
        self.rng2 = ops.random.Uniform(range=[0.875, 1.125])
        self.rng3 = ops.random.Uniform(range=[-0.5, 0.5])
        self.flip_coin = ops.random.CoinFlip(probability=0.5)
        self.box_encoder = ops.BoxEncoder(
            device="cpu", criteria=0.5, anchors=default_boxes.as_ltrb_list()
        )

    def define_graph(self):
        saturation = self.rng1()
        contrast = self.rng1()
        brightness = self.rng2()
        hue = self.rng3()
        coin_rnd = self.flip_coin()
        inputs, bboxes, labels = self.input(name="Reader")
        crop_begin, crop_size, bboxes, labels = self.crop(bboxes, labels)
        images = self.decode_slice(inputs, crop_begin, crop_size)
        images = self.flip(images, horizontal=coin_rnd)
        bboxes = self.bbflip(bboxes, horizontal=coin_rnd)
        images = self.resize(images)
        if self.gpu_output:
            images = images.gpu()
        images = self.hsv(images, hue=hue, saturation=saturation)
        images = self.bc(images, brightness=brightness, contrast=contrast)
        images = self.normalize(images)
        bboxes, labels = self.box_encoder(bboxes, labels)
        if self.gpu_output:
            return images, bboxes.gpu(), labels.gpu()
        return images, bboxes, labels


def dle_style_batch(pipe, device):
    """One step of DeepLearningExamples' ``DALICOCOIterator``: its calls on the pipeline and on
    the outputs, in its order, into freshly allocated torch tensors."""
    to_torch_type = {np.float32: torch.float32, np.int32: torch.int32, np.uint8: torch.uint8}
    pipe._prefetch()
    images_tl, bboxes_tl, labels_tl = pipe.share_outputs()
    images = images_tl.as_tensor()
    images_shape = images.shape()
    bboxes_shape = [bboxes_tl[k].shape() for k in range(len(bboxes_tl))]
    offsets = [0]
    labels_shape = []
    for k in range(len(labels_tl)):
        lshape = labels_tl[k].shape()
        offsets.append(offsets[k] + lshape[0])
        labels_shape.append(lshape)
    images_type = to_torch_type[types.to_numpy_type(images.dtype)]
    bboxes_type = to_torch_type[types.to_numpy_type(bboxes_tl[0].dtype)]
    labels_type = to_torch_type[types.to_numpy_type(labels_tl[0].dtype)]
    pyt_images = torch.zeros(images_shape, dtype=images_type, device=device)
    pyt_bboxes = [torch.zeros(s, dtype=bboxes_type, device=device) for s in bboxes_shape]
    pyt_labels = [torch.zeros(s, dtype=labels_type, device=device) for s in labels_shape]

    def feed(dali_tensor, arr):
        assert dali_tensor.shape() == list(arr.size())
        dali_tensor.copy_to_external(ctypes.c_void_p(arr.data_ptr()))
        return arr

    feed(images, pyt_images)
    for k in range(len(bboxes_tl)):
        if pyt_bboxes[k].shape[0] != 0:
            feed(bboxes_tl[k], pyt_bboxes[k])
    for k in range(len(labels_tl)):
        if pyt_labels[k].shape[0] != 0:
            feed(labels_tl[k], pyt_labels[k])
    pipe.release_outputs()
    pipe.schedule_run()
    return pyt_images, torch.stack(pyt_bboxes), torch.stack(pyt_labels), offsets


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_dle_ssd_example(tiny_coco, gpu):
    require("decoders.image_slice", to_numpy_type=True)
    root, ann = tiny_coco
    pipe = DleSSDPipeline(root, ann, DBOXES, batch_size=4, num_threads=2, seed=15, gpu=gpu)
    pipe.build()
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    for _ in range(4):  # more than an epoch: the reader streams on
        images, boxes, labels, offsets = dle_style_batch(pipe, device)
        check_ssd_batch(images, boxes, labels, 4)
        assert offsets == [NUM_ANCHORS * k for k in range(5)]
        assert float(images.min()) >= 0 and float(images.max()) <= 1  # std 255
    pipe.close()


# --- the chain without slice: runs with this helper's operators today ----------------------------


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.gpu)])
def test_detection_chain_without_slice(tiny_coco, gpu):
    if gpu and not HAS_GPU:
        pytest.skip("needs a CUDA GPU with CuPy")
    root, ann = tiny_coco

    class Chain(DaliSSDPipeline):
        def define_graph(self):
            coin = self.flip_coin()
            inputs, bboxes, labels = self.input(name="Reader")
            images = self.decode(inputs)
            _, _, bboxes, labels = self.crop(bboxes, labels)
            images = self.flip(images, horizontal=coin)
            bboxes = self.bbflip(bboxes, horizontal=coin)
            images = self.resize(images)
            if self.gpu_output:
                images = images.gpu()
            images = self.hsv(images, hue=self.rng3(), saturation=self.rng1())
            images = self.bc(images, brightness=self.rng2(), contrast=self.rng1())
            images = self.normalize(images)
            bboxes, labels = self.box_encoder(bboxes, labels)
            return images, bboxes, labels

    pipe = Chain(root, ann, DBOXES, batch_size=4, num_threads=2, seed=3, gpu=gpu)
    it = DALIGenericIterator(pipe, ["images", "boxes", "labels"], reader_name="Reader")
    batches = list(it)
    assert len(batches) == 3
    for (batch,) in batches:
        check_ssd_batch(batch["images"], batch["boxes"], batch["labels"], 4)
