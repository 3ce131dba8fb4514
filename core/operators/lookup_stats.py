"""``_lookup_stats``: the automatic augmentations' value-wise maps of uint8 data, static or
depending on each plane's statistics, one operator for a batch whose samples each take their
own: a static 256-entry table (posterize, solarize, solarize_add, invert), brightness,
contrast, auto_contrast or equalize.

``auto_aug``'s ``select`` runs the samples of all the value-wise augmentations of a choice
through this operator, each with its row of a description made when the graph is built (a
kind, a float parameter, a static table), instead of each augmentation's own operators
(contrast alone is five) and their branches: TrivialAugment Wide's GPU stage runs 14
operators a batch instead of 33 (docs/auto-aug-and-proxy.md; the static tables alone:
BENCHMARKS.md, "Automatic augmentation: fused warps and lookup tables"). Every map is a
table per plane (sample, frame, channel):
on the GPU, one histogram launch for the samples that need statistics, one launch making the
tables, one lookup (``kernels/point_stats.py``).

The tables follow each augmentation's own operators on each device, in their float32
arithmetic and their conversion to uint8 (the GPU rounds half to even, the CPU half away from
zero), so the outputs are equal, with one exception: contrast's float32 ``center + (x -
center) * factor`` is contracted to a fused multiply-add by the GPU compiler in both the
expression kernel and ``point_lut`` (the same source form); should the two compilations
differ, a value at a rounding tie may move by 1 (tests compare contrast within 1).

Layouts: those of ``fn.equalize`` (``HW``, ``HWC``, ``CHW``, ``FHW``, ``FHWC``, ``FCHW``);
contrast takes 1 or 3 channels, last.
"""

from __future__ import annotations

import cv2
import numpy as np

from .._dtype import convert_sat
from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import as_samples
from ..kernels.point_stats import (
    AUTO_CONTRAST,
    BRIGHTNESS,
    CONTRAST,
    EQUALIZE,
    TABLE,
    point_stats_batch,
)
from .brightness_contrast import apply_lut
from .equalize import _DEFAULT, equalize_geometries, equalize_geometry
from .lookup_rows import device_table, sample_rows

__all__ = ["KINDS", "LookupStats"]

KINDS = {
    "table": TABLE,
    "brightness": BRIGHTNESS,
    "contrast": CONTRAST,
    "auto_contrast": AUTO_CONTRAST,
    "equalize": EQUALIZE,
}
# the luma weights of augmentations.contrast (float32, as its constant node holds them)
WEIGHTS = np.array([0.299, 0.587, 0.114], dtype=np.float32)
_VALUES = np.arange(256, dtype=np.uint8)
_FVALUES = np.arange(256, dtype=np.float32)


@register
class LookupStats(Operator):
    """Each sample's value-wise map, by its row ``r``: ``kind[r]`` (``KINDS``) with factor
    ``param[r]`` (brightness, contrast) or table ``table[r]`` (static).

    Args:
        kind: int array (rows,) of ``KINDS`` values.
        param: float32 array (rows,).
        table: uint8 array (rows, 256): the static rows' tables (any values elsewhere).
        row: the sample's row (an int, or a per-sample argument input).
    """

    schema = "_lookup_stats"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"row"})

    def setup(self, *, kind, param, table, row=0) -> None:
        table = np.asarray(table)
        kind = np.asarray(kind, np.int32).reshape(-1)
        param = np.asarray(param, np.float32).reshape(-1)
        if table.dtype != np.uint8 or table.ndim != 2 or table.shape[1] != 256:
            raise ArgumentError(
                f"{self.schema}: table must be uint8 rows of 256 values, got {table.dtype} "
                f"{table.shape}"
            )
        if (
            not (len(kind) == len(param) == len(table))
            or not np.isin(kind, list(KINDS.values())).all()
        ):
            raise ArgumentError(f"{self.schema}: kind, param and table must have one entry a row")
        self.table = np.ascontiguousarray(table)
        self.kind, self.param = kind, param
        self._any_contrast = bool((kind == CONTRAST).any())
        self.row = row
        self._layout = ""
        self._device_tables: dict[int, object] = {}

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [self._layout]

    def _check(self, dtype, rows, geometry=None) -> None:
        if np.dtype(dtype) != np.uint8:
            raise ArgumentError(
                f"{self.schema}: input type {np.dtype(dtype)} is not supported; only uint8"
            )
        rows = np.asarray(rows)
        if rows.size and (rows.min() < 0 or rows.max() >= len(self.table)):
            raise ArgumentError(
                f"{self.schema}: row {rows.tolist()} outside the {len(self.table)} rows"
            )
        if geometry is not None and self._any_contrast:
            g = np.asarray(geometry).reshape(-1, 4)[self.kind[rows.reshape(-1)] == CONTRAST]
            if len(g) and (((g[:, 2] != 1) & (g[:, 2] != 3)) | (g[:, 3] != 1)).any():
                raise ArgumentError(
                    f"{self.schema}: contrast takes 1 or 3 channels, last (layout {self._layout!r})"
                )

    # --- CPU ----------------------------------------------------------------------------------
    def run_sample(self, inputs, args, param):
        x = inputs[0]
        row = int(args["row"]) if "row" in args else int(self.row)
        self._check(x.dtype, row)
        kind = int(self.kind[row])
        if kind == TABLE:
            return apply_lut(x, self.table[row])
        if kind == BRIGHTNESS:  # fn.brightness: in * b + 0 in float32, half away from zero
            return apply_lut(x, convert_sat(_FVALUES * self.param[row] + np.float32(0.0), np.uint8))
        layout = self._layout or _DEFAULT.get(x.ndim, "")
        geometry = equalize_geometry(self.schema, layout, x.shape)
        self._check(x.dtype, row, geometry)
        if x.size == 0:  # no value to map
            return x.copy()
        frames, _, channels, divisor = geometry
        last = divisor == 1
        h, w = _hw(x, layout)
        # (F, H, W, C) or (F, C, H, W): plane (f, c) is frames_[f, ..., c] or frames_[f, c]
        frames_ = x.reshape(frames, h, w, channels) if last else x.reshape(frames, channels, h, w)
        out = np.empty_like(frames_)
        for f in range(frames):
            src, dst = frames_[f], out[f]
            if kind == EQUALIZE:  # fn.equalize's CPU side: OpenCV's, plane by plane
                for c in range(channels):
                    plane = src[..., c] if last else src[c]
                    eq = cv2.equalizeHist(np.ascontiguousarray(plane))
                    if last:
                        dst[..., c] = eq
                    else:
                        dst[c] = eq
                continue
            flat = src.reshape(h * w, channels).T if last else src.reshape(channels, h * w)
            tables = self._tables(kind, row, flat)
            if kind == CONTRAST or channels == 1:  # one table for the frame
                dst[...] = apply_lut(np.ascontiguousarray(src), tables[0])
            elif last and channels in (3, 4):  # a table per channel, in one pass
                lut = np.ascontiguousarray(np.stack(tables, axis=-1).reshape(256, 1, channels))
                pixels = np.ascontiguousarray(src).reshape(h * w, 1, channels)
                dst[...] = cv2.LUT(pixels, lut).reshape(src.shape)
            else:
                for c in range(channels):
                    if last:
                        dst[..., c] = tables[c][src[..., c]]
                    else:
                        dst[c] = tables[c][src[c]]
        return out.reshape(x.shape)

    def _tables(self, kind: int, row: int, flat: np.ndarray) -> list:
        """The tables of one frame's channels (contrast: one for all), as the augmentations'
        CPU operators compute them; ``flat``: the frame's values, (channels, pixels)."""
        if kind == CONTRAST:
            # reductions.mean (float64 sum times 1/n, stored as float32), * weights in
            # float32, reductions.sum in float64 stored as float32; then the expression in
            # float32 and cast_like (half away from zero)
            sums = flat.sum(axis=1, dtype=np.uint64).astype(np.float64)
            means = (sums * (1.0 / flat.shape[1])).astype(np.float32)
            means = np.repeat(means, 3) if len(means) == 1 else means
            center = np.float32(np.sum((means * WEIGHTS).astype(np.float64)))
            p = self.param[row]
            return [convert_sat(center + (_FVALUES - center) * p, np.uint8)]
        tables = []
        # auto_contrast: min, max, 255 / (range or 255), (data - lo) * scale, cast_like
        for lo, hi in zip(flat.min(axis=1).tolist(), flat.max(axis=1).tolist(), strict=True):
            diff = hi - lo
            shift = np.uint8(lo if diff > 0 else 0)
            scale = np.float32(255) / np.float32(diff if diff > 0 else 255)
            shifted = (_VALUES - shift).astype(np.float32)  # (uint8, wrapping as the op does)
            tables.append(convert_sat(shifted * scale, np.uint8))
        return tables

    # --- GPU ----------------------------------------------------------------------------------
    def run_batch(self, inputs, args, params, stream):
        s = as_samples(inputs[0])
        rows = sample_rows(args, len(s), self.row)
        geometry = equalize_geometries(self.schema, self._layout, s.shapes)
        self._check(s.dtype, rows, geometry)
        table = device_table(self, s.device_id)
        return point_stats_batch(
            s, geometry, self.kind[rows], self.param[rows], rows, table, WEIGHTS, stream=stream
        )


def _hw(x: np.ndarray, layout: str) -> tuple[int, int]:
    return x.shape[layout.index("H")], x.shape[layout.index("W")]
