"""A synthetic image-classification dataset: class folders of JPEGs with smooth random
content, sized like ImageNet (about 400-640 px on the long side) unless told otherwise.

Used by ``dlpipe demo``, the benchmarks and the tests, so every number is reproducible without
downloading data.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np


def synthetic_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """An RGB uint8 image: a colour gradient, blurred blobs and fine noise (JPEG-realistic)."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = rng.uniform(0, 255, 3).astype(np.float32)
    slope = rng.uniform(-0.3, 0.3, (2, 3)).astype(np.float32)
    img = base + yy[..., None] * slope[0] + xx[..., None] * slope[1]
    small = rng.uniform(0, 255, (max(2, height // 32), max(2, width // 32), 3)).astype(np.float32)
    img = 0.5 * img + 0.5 * cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    img += rng.normal(0, 12, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_dataset(
    root: str,
    num_classes: int = 4,
    per_class: int = 16,
    size_range: tuple[int, int] = (400, 640),
    quality: int = 90,
    seed: int = 0,
    num_threads: int = 8,
) -> str:
    """Write ``num_classes`` folders of ``per_class`` JPEGs under ``root`` (kept if present).

    Returns ``root``. A finished dataset is marked with a ``.complete`` file, so a half-written
    one (interrupted run) is rewritten.
    """
    marker = os.path.join(root, ".complete")
    if os.path.exists(marker):
        return root
    jobs = []
    for c in range(num_classes):
        os.makedirs(os.path.join(root, f"class_{c:03d}"), exist_ok=True)
        for i in range(per_class):
            jobs.append((c, i))

    def write(job: tuple[int, int]) -> None:
        c, i = job
        rng = np.random.default_rng([seed, c, i])
        long_side = int(rng.integers(size_range[0], size_range[1] + 1))
        short_side = int(long_side * rng.uniform(0.66, 1.0))
        h, w = (short_side, long_side) if rng.random() < 0.75 else (long_side, short_side)
        bgr = synthetic_image(rng, h, w)
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, quality])
        assert ok
        buf.tofile(os.path.join(root, f"class_{c:03d}", f"img_{i:06d}.jpg"))

    with ThreadPoolExecutor(num_threads) as pool:
        list(pool.map(write, jobs))
    open(marker, "w").close()
    return root
