"""COCO masks: run-length encodings, polygon rasterisation and DALI's pixelwise label masks.

DALI builds ``readers.coco(pixelwise_masks=True)`` with the COCO API's C code (``maskApi.c``):
polygons become run-length encodings (RLE) through ``rleFrPoly``, compressed RLE strings are
read by ``rleFrString``, and the per-label masks are merged run by run. This module computes
the same pixels with numpy, so masks equal DALI's bit for bit:

* An RLE is a uint32 array of run lengths over the image in *column-major* order (down the
  first column, then the next), alternating background and foreground, starting with
  background (the first count may be 0).
* ``polygon_to_rle`` follows ``rleFrPoly``: vertices are scaled by 5 and rounded, the edges are
  walked one step per scaled pixel, and a pixel column's run starts where an edge crosses the
  centre of a pixel column. Vertices are taken as float32 (DALI keeps them so), then doubles.
* ``label_mask`` composes the image's label mask as DALI's ``COCOReader::PixelwiseMasks`` does
  (see its docstring for the two quirks it keeps).
"""

from __future__ import annotations

import numpy as np

SCALE = 5.0  # rleFrPoly's upsampling factor


def rle_from_string(s: str | bytes) -> np.ndarray:
    """Counts of a compressed COCO RLE string (``rleFrString``: LEB128-like, 5 bits a char,
    chars 48..111, counts after the second stored as the difference to the one two back)."""
    data = s.encode() if isinstance(s, str) else bytes(s)
    counts: list[int] = []
    p, n = 0, len(data)
    while p < n:
        x, k, more = 0, 0, True
        while more:
            if p >= n:
                raise ValueError("a compressed RLE string ends in the middle of a count")
            c = data[p] - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x & 0xFFFFFFFF)  # C stores it in a uint
    return np.asarray(counts, dtype=np.uint32)


def rle_to_string(counts: np.ndarray) -> str:
    """The compressed string of RLE ``counts`` (``rleToString``; tests and tools)."""
    out = []
    cnts = [int(c) for c in counts]
    for i, c in enumerate(cnts):
        x = c - cnts[i - 2] if i > 2 else c
        more = True
        while more:
            ch = x & 0x1F
            x >>= 5
            more = x != -1 if ch & 0x10 else x != 0
            if more:
                ch |= 0x20
            out.append(chr(ch + 48))
    return "".join(out)


def _trunc(x: np.ndarray) -> np.ndarray:
    """C's double -> int conversion (toward zero)."""
    return np.trunc(x).astype(np.int64)


def polygon_to_rle(xy, h: int, w: int) -> np.ndarray:
    """RLE counts of the polygon with vertices ``xy`` ((k, 2) or flat x0, y0, x1, ...) rasterised
    on an ``h`` x ``w`` image, as ``rleFrPoly`` computes them.

    Example:
        >>> mask = rle_decode(polygon_to_rle([[1, 1], [1, 3], [3, 3], [3, 1]], 5, 5), 5, 5)
    """
    pts = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    k = len(pts)
    if k == 0:
        return np.asarray([h * w], dtype=np.uint32)
    x = _trunc(SCALE * pts[:, 0] + 0.5)
    y = _trunc(SCALE * pts[:, 1] + 0.5)
    x = np.append(x, x[0])
    y = np.append(y, y[0])
    us, vs = [], []
    for j in range(k):  # walk every edge densely, one step per scaled pixel along its long axis
        xs, xe, ys, ye = int(x[j]), int(x[j + 1]), int(y[j]), int(y[j + 1])
        dx, dy = abs(xe - xs), abs(ys - ye)
        flip = (dx >= dy and xs > xe) or (dx < dy and ys > ye)
        if flip:
            xs, xe, ys, ye = xe, xs, ye, ys
        if dx >= dy:
            s = (ye - ys) / dx if dx else 0.0
            d = np.arange(dx + 1)
            t = dx - d if flip else d
            us.append(t + xs)
            vs.append(_trunc(ys + s * t + 0.5))
        else:
            s = (xe - xs) / dy
            d = np.arange(dy + 1)
            t = dy - d if flip else d
            vs.append(t + ys)
            us.append(_trunc(xs + s * t + 0.5))
    u = np.concatenate(us)
    v = np.concatenate(vs)
    # Where the walk crosses a column of the scaled grid that is a pixel centre: a run starts.
    step = np.nonzero(u[1:] != u[:-1])[0] + 1
    uj, up, vj, vp = u[step], u[step - 1], v[step], v[step - 1]
    xd = np.where(uj < up, uj, uj - 1).astype(np.float64)
    xd = (xd + 0.5) / SCALE - 0.5
    keep = (np.floor(xd) == xd) & (xd >= 0) & (xd <= w - 1)
    yd = np.minimum(vj, vp).astype(np.float64)
    yd = (yd + 0.5) / SCALE - 0.5
    yd = np.ceil(np.clip(yd, 0, h))
    a = (xd[keep].astype(np.int64) * h + yd[keep].astype(np.int64)).astype(np.uint32)
    a = np.sort(np.append(a, np.uint32(h * w)))
    a = np.diff(a, prepend=np.uint32(0)).astype(np.uint32)
    # Drop zero-length runs: a 0 merges the run after it into the one before it.
    out = [int(a[0])]
    j = 1
    while j < len(a):
        if a[j] > 0:
            out.append(int(a[j]))
            j += 1
        else:
            j += 1
            if j < len(a):
                out[-1] += int(a[j])
                j += 1
    return np.asarray(out, dtype=np.uint32)


def rle_decode(counts: np.ndarray, h: int, w: int) -> np.ndarray:
    """The (h, w) bool mask of RLE ``counts`` (runs in column-major order, background first)."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total != h * w:
        raise ValueError(f"the RLE counts add up to {total} pixels, but the mask has {h}x{w}")
    values = (np.arange(len(counts)) % 2).astype(bool)
    return np.repeat(values, counts).reshape(w, h).T


def _run_starts(flat: np.ndarray) -> np.ndarray:
    """Positions (> 0) in a column-major flattened mask where its value changes."""
    return np.nonzero(flat[1:] != flat[:-1])[0] + 1


def label_mask(
    h: int,
    w: int,
    labels: np.ndarray,
    polygons: np.ndarray,
    vertices: np.ndarray,
    rles: list[tuple[int, np.ndarray]],
) -> np.ndarray:
    """The (h, w, 1) int32 label mask of one image, as DALI's COCO reader makes it.

    Args:
        h, w: the image size (from the annotations file).
        labels: the image's object labels (M,).
        polygons: (P, 3) int32 rows [object index, first vertex, end vertex].
        vertices: (V, 2) float32.
        rles: (object index, RLE counts) of the objects annotated by RLE.

    Each label's mask is the union of its objects' polygons, or, for a label without polygons,
    the RLE of its last RLE object (a label with both keeps only its polygons). Labels are laid
    in ascending order, a higher label over a lower one. Two quirks of DALI's run-by-run merge
    are kept: where two labels overlap in the last run of the merge (the run that reaches the
    image's last pixel in column-major order) the lower label stays on top; and when the
    lowest label of the image has no mask at all, the whole mask is 0.
    """
    out = np.zeros((h, w, 1), np.int32)
    if len(labels) == 0:
        return out
    per_label: dict[int, np.ndarray] = {}
    for obj, counts in rles:
        per_label[int(labels[obj])] = rle_decode(counts, h, w).T.reshape(-1)
    poly_masks: dict[int, np.ndarray] = {}
    for obj, start, end in np.asarray(polygons).reshape(-1, 3):
        label = int(labels[obj])
        pts = np.asarray(vertices[start:end], dtype=np.float32)
        m = rle_decode(polygon_to_rle(pts, h, w), h, w).T.reshape(-1)
        poly_masks[label] = m if label not in poly_masks else poly_masks[label] | m
    per_label.update(poly_masks)
    order = sorted({int(x) for x in labels})
    first = per_label.get(order[0])
    if first is None:
        return out
    flat = np.where(first, order[0], 0).astype(np.int32)
    bounds = _run_starts(first)
    last_start = int(bounds[-1]) if len(bounds) else 0
    for label in order[1:]:
        mask = per_label.get(label)
        if mask is None:
            continue
        b = _run_starts(mask)
        if len(b):
            last_start = max(last_start, int(b[-1]))
        tail = np.zeros(h * w, bool)
        tail[last_start:] = True
        flat = np.where(mask & ~(tail & (flat != 0)), label, flat).astype(np.int32)
    out[:, :, 0] = flat.reshape(w, h).T
    return out
