"""``show_images``: a grid picture of a batch, for eyeballing what a pipeline produces."""

from __future__ import annotations

import math

import cv2
import numpy as np


def _to_hwc_uint8(img: np.ndarray, layout: str) -> np.ndarray:
    img = np.asarray(img)
    if img.ndim == 2:
        img = img[:, :, None]
    if layout.endswith("CHW") or (not layout and img.shape[0] in (1, 3, 4) and img.shape[-1] > 4):
        img = np.moveaxis(img, 0, -1)
    img = img[:, :, :3]
    if img.dtype != np.uint8:
        img = img.astype(np.float32)
        lo, hi = float(img.min()), float(img.max())
        img = (img - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(img)
        img = np.clip(img + 0.5, 0, 255).astype(np.uint8)
    if img.shape[2] == 1:
        img = np.repeat(img, 3, axis=2)
    return img


def show_images(batch, path: str | None = None, columns: int = 4, cell: int = 160):
    """Draw a batch as a grid (RGB). CPU or GPU batches; HWC or CHW; normalized ones are
    rescaled to 0-255 per image.

    Args:
        batch: a TensorListCPU/TensorListGPU, an array of shape (N, ...) or a list of images.
        path: write a PNG there; otherwise return the grid as an RGB array.
        columns: images per row.
        cell: the size in pixels of each (square) cell; images keep their aspect ratio.

    Returns:
        The grid as an (H, W, 3) uint8 RGB array.
    """
    layout = batch.layout() if hasattr(batch, "layout") else ""
    if hasattr(batch, "as_cpu"):
        batch = batch.as_cpu()
        images = [batch.at(i) for i in range(len(batch))]
    else:
        images = list(batch)
    if not images:
        raise ValueError("show_images: the batch is empty")
    rows = math.ceil(len(images) / columns)
    grid = np.full((rows * cell, columns * cell, 3), 255, np.uint8)
    for k, img in enumerate(images):
        img = _to_hwc_uint8(img, layout)
        h, w = img.shape[:2]
        s = cell / max(h, w)
        th, tw = max(1, round(h * s)), max(1, round(w * s))
        thumb = cv2.resize(img, (tw, th), interpolation=cv2.INTER_AREA)
        r, c = divmod(k, columns)
        y, x = r * cell + (cell - th) // 2, c * cell + (cell - tw) // 2
        grid[y : y + th, x : x + tw] = thumb
    if path is not None:
        cv2.imwrite(path, cv2.cvtColor(grid, cv2.COLOR_RGB2BGR))
    return grid
