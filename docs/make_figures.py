"""Draw the pictures of the docs (numpy + OpenCV only): ``python docs/make_figures.py``.

sharding.png: N=10 samples over 3 shards with DALI's formula, the padding that
``pad_last_batch=True`` adds, batches of 2, and the shard each reader reads in epochs 0 and 1.
The numbers come from ``dlpipe.readers._sharding``, so the picture cannot drift from the code.
"""

from __future__ import annotations

import math
import os

import cv2
import numpy as np

from dlpipe.readers._sharding import padded_shard_size, shard_size, shard_start

N, SHARDS, BATCH = 10, 3, 2
BOX, GAP, LEFT, TOP = 44, 6, 250, 70
COLORS = [(66, 133, 244), (52, 168, 83), (251, 188, 5)]  # RGB, one per shard
PAD = (200, 200, 200)
FONT = cv2.FONT_HERSHEY_SIMPLEX


def text(img, s, x, y, scale=0.5, color=(0, 0, 0), thickness=1):
    cv2.putText(img, s, (x, y), FONT, scale, color, thickness, cv2.LINE_AA)


def box(img, x, y, label, fill, hatched=False):
    cv2.rectangle(img, (x, y), (x + BOX, y + BOX), fill, -1)
    if hatched:
        for d in range(-BOX, BOX, 8):
            cv2.line(
                img,
                (x + max(d, 0), y + max(-d, 0)),
                (x + min(BOX, BOX + d), y + min(BOX, BOX - d)),
                (255, 255, 255),
                1,
            )
    cv2.rectangle(img, (x, y), (x + BOX, y + BOX), (60, 60, 60), 1)
    (tw, th), _ = cv2.getTextSize(label, FONT, 0.55, 1)
    text(img, label, x + (BOX - tw) // 2, y + (BOX + th) // 2, 0.55)


def row(img, y, title, indices, shard_of, pads=0, batches=True):
    text(img, title, 10, y + BOX // 2 + 5, 0.5)
    x = LEFT
    items = [(i, False) for i in indices] + [(indices[-1], True)] * pads
    for i, pad in items:
        box(img, x, y, str(i), PAD if pad else COLORS[shard_of(i)], hatched=pad)
        x += BOX + GAP
    if batches:
        for b in range(math.ceil(len(items) / BATCH)):
            x0 = LEFT + b * BATCH * (BOX + GAP)
            x1 = x0 + min(BATCH, len(items) - b * BATCH) * (BOX + GAP) - GAP
            cv2.line(img, (x0, y + BOX + 5), (x1, y + BOX + 5), (90, 90, 90), 2)
            text(img, f"batch {b}", x0 + 2, y + BOX + 20, 0.4, (90, 90, 90))


def sharding_figure() -> np.ndarray:
    padded = padded_shard_size(N, SHARDS)

    def shard_of(i: int) -> int:
        return next(s for s in range(SHARDS) if i < shard_start(N, s + 1, SHARDS))

    rows = 1 + 2 * SHARDS
    height = TOP + rows * (BOX + 34) + 60
    width = LEFT + N * (BOX + GAP) + 30
    img = np.full((height, width, 3), 255, np.uint8)
    text(
        img,
        f"N = {N} samples, num_shards = {SHARDS}, batch_size = {BATCH}",
        10,
        28,
        0.7,
        thickness=2,
    )
    text(
        img,
        "shard i = [floor(N*i/S), floor(N*(i+1)/S));  pad_last_batch pads each to ceil(N/S) = "
        f"{padded}",
        10,
        52,
        0.45,
    )
    y = TOP
    row(img, y, "dataset (reader's file list)", list(range(N)), shard_of, batches=False)
    y += BOX + 34
    for epoch in (0, 1):
        for k in range(SHARDS):
            s = (k + epoch) % SHARDS
            start, size = shard_start(N, s, SHARDS), shard_size(N, s, SHARDS)
            title = f"epoch {epoch}, shard_id={k}: shard {s}"
            row(img, y, title, list(range(start, start + size)), shard_of, pads=padded - size)
            y += BOX + 34
    box(img, 10, y, "9", PAD, hatched=True)
    text(img, "padding: the last sample read, repeated (pad_last_batch=True);", 64, y + 18, 0.45)
    text(
        img,
        "epoch 1: without stick_to_shard, reader k reads shard (k + epoch) % S",
        64,
        y + 38,
        0.45,
    )
    return img


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "sharding.png")
    cv2.imwrite(path, cv2.cvtColor(sharding_figure(), cv2.COLOR_RGB2BGR))
    print(path)


if __name__ == "__main__":
    main()
