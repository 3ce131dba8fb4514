"""The GPU side of ``_lookup_stats`` (``point_stats.cu``): the value-wise maps of the automatic
augmentations, one table per plane, in three launches per batch (four with the histograms'
zeroing): ``equalize.cu``'s histograms of the samples that need them, ``point_lut``'s tables,
``equalize.cu``'s lookup."""

from __future__ import annotations

import numpy as np

from . import get_function, stream_scoped, upload
from .equalize import (
    BINS,
    EQ_DESC,
    contiguous_in_new_out,
    equalize_descs,
    launch_apply,
    launch_hist,
)

# kinds of table (``point_stats.cu``'s PS_*)
TABLE, BRIGHTNESS, CONTRAST, AUTO_CONTRAST, EQUALIZE = range(5)

POINT_DESC = np.dtype(
    [
        ("first", "<i8"),
        ("pixels", "<i8"),
        ("norm", "<f8"),
        ("param", "<f4"),
        ("kind", "<i4"),
        ("row", "<i4"),
        ("channels", "<i4"),
        ("channel", "<i4"),
        ("pad", "<i4"),
    ]
)
assert POINT_DESC.itemsize == EQ_DESC.itemsize == 48  # (uploaded as rows of one table)


def _rows(d: np.ndarray) -> np.ndarray:
    return d.view(np.uint8).reshape(len(d), 48)


def point_descs(geometry: np.ndarray, plane0: np.ndarray, kinds, params, rows) -> np.ndarray:
    """One ``POINT_DESC`` per plane (sample, frame, channel, in ``equalize_descs``' order).

    Args:
        geometry: (N, 4) int64 (frames, pixels, channels, divisor) per sample.
        plane0: each sample's first plane.
        kinds, params, rows: per sample.
    """
    frames, pixels, channels = geometry[:, 0], geometry[:, 1], geometry[:, 2]
    per_sample = frames * channels
    sample = np.repeat(np.arange(len(geometry)), per_sample)
    local = np.arange(len(sample)) - np.repeat(plane0, per_sample)
    ch = channels[sample]
    d = np.zeros(len(sample), POINT_DESC)
    d["channel"] = local % ch
    d["first"] = plane0[sample] + (local - d["channel"])
    d["pixels"] = pixels[sample]
    with np.errstate(divide="ignore"):
        d["norm"] = 1.0 / pixels[sample].astype(np.float64)
    d["param"] = np.asarray(params, np.float32)[sample]
    d["kind"] = np.asarray(kinds, np.int32)[sample]
    d["row"] = np.asarray(rows, np.int32)[sample]
    d["channels"] = ch
    return d


@stream_scoped
def point_stats_batch(inputs, geometry, kinds, params, rows, table_dev, weights, stream=None):
    """``out[plane] = lut[plane][in]`` for each plane of a uint8 batch, each plane's table made
    by its sample's kind (``TABLE``: row ``rows[k]`` of ``table_dev``; ``BRIGHTNESS`` /
    ``CONTRAST``: factor ``params[k]``; ``AUTO_CONTRAST``; ``EQUALIZE``).

    Args:
        inputs: the uint8 batch.
        geometry: (N, 4) int64 per sample, as ``operators.equalize.equalize_geometries``.
        kinds, params, rows: per sample (int, float32, int arrays of N).
        table_dev: the static tables, a device array of rows of 256 uint8.
        weights: contrast's three channel weights (float32).
    """
    import cupy

    s, out = contiguous_in_new_out(inputs, stream)
    n = len(s)
    if n == 0:
        return out
    d, planes = equalize_descs(s.ptrs, out.ptrs, geometry)
    sizes = d["pixels"] * d["channels"] * d["frames"]
    if planes == 0 or int(sizes.max()) == 0:
        return out
    kinds = np.asarray(kinds)
    stats = np.flatnonzero(kinds >= CONTRAST)
    pd = point_descs(geometry, d["plane0"], kinds, params, rows)
    # one upload of 48-byte rows: the lookup's descriptors (every sample), the histograms'
    # (the samples with statistics), the tables' (every plane)
    rows48 = np.concatenate([_rows(d), _rows(d[stats]), _rows(pd)])
    dev = upload(rows48, stream)
    descs, hist_descs, plane_descs = dev[:n], dev[n : n + len(stats)], dev[n + len(stats) :]
    lut = cupy.empty(planes * BINS, np.uint8)
    hist = lut  # (read by no table when no sample needs statistics)
    if len(stats):
        hist = cupy.zeros(planes * BINS, np.uint32)
        launch_hist(d[stats], hist_descs, hist, s.device_id, stream)
    w = [np.float32(v) for v in weights]
    get_function("point_stats.cu", "point_lut", s.device_id)(
        (planes, 1, 1), (BINS, 1, 1), (plane_descs, hist, table_dev, lut, *w), stream=stream
    )
    launch_apply(int(sizes.max()), descs, lut, n, s.device_id, stream)
    return out
