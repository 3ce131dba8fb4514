"""``_lookup_rows``: a 256-entry lookup table per sample of uint8 data, picked per sample from
the rows of one table given when the graph is built.

The automatic augmentations' point operations (posterize, solarize, solarize_add, invert) map
each value on its own, so each is a table per parameter value; ``auto_aug``'s ``select`` runs
the samples of all of them through this one operator, each with its own row (BENCHMARKS.md,
"Automatic augmentation: fused warps and lookup tables"). The table goes to the GPU once;
each batch uploads only its descriptors.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels._batch import as_samples
from . import _small

__all__ = ["LookupRows"]


@register
class LookupRows(Operator):
    """``table[row][x]`` for every value ``x`` of a uint8 sample.

    Args:
        table: uint8 array of shape (rows, 256).
        row: the sample's row of ``table`` (an int, or a per-sample argument input).
    """

    schema = "_lookup_rows"
    devices = ("cpu", "gpu")
    arg_inputs = frozenset({"row"})

    def setup(self, *, table, row=0) -> None:
        table = np.asarray(table)
        if table.dtype != np.uint8 or table.ndim != 2 or table.shape[1] != 256:
            raise ArgumentError(
                f"{self.schema}: table must be uint8 rows of 256 values, got {table.dtype} "
                f"{table.shape}"
            )
        self.table = np.ascontiguousarray(table)
        self.row = row
        self._device_tables: dict[int, object] = {}

    def _check(self, dtype, rows) -> None:
        if np.dtype(dtype) != np.uint8:
            raise ArgumentError(
                f"{self.schema}: input type {np.dtype(dtype)} is not supported; only uint8"
            )
        if np.size(rows) and (np.min(rows) < 0 or np.max(rows) >= len(self.table)):
            raise ArgumentError(
                f"{self.schema}: row {np.asarray(rows).tolist()} outside the "
                f"{len(self.table)} rows of the table"
            )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        row = int(args["row"]) if "row" in args else int(self.row)
        self._check(x.dtype, row)
        return self.table[row][x]

    def run_batch(self, inputs, args, params, stream):
        from ..kernels.equalize import lookup_rows_batch

        s = as_samples(inputs[0])
        rows = sample_rows(args, len(s), self.row)
        self._check(s.dtype, rows)
        table = device_table(self, s.device_id)
        return lookup_rows_batch(s, table, rows, stream=stream)


def sample_rows(args: dict, n: int, default) -> np.ndarray:
    """Each sample's row of a table operator (``_lookup_rows``, ``_lookup_stats``), int64:
    the ``row`` argument input's values, else ``default`` for every sample."""
    if "row" not in args:
        return np.full(n, int(default), np.int64)
    rows = _small.stack(args["row"])
    if rows is None or rows.ndim != 1:
        rows = np.array([int(r) for r in args["row"]], np.int64)
    return rows.astype(np.int64, copy=False)


def device_table(op, device_id: int):
    """``op.table`` on the GPU ``device_id``: copied once per device, then kept in
    ``op._device_tables``."""
    import cupy

    table = op._device_tables.get(device_id)
    if table is None:
        with cupy.cuda.Device(device_id):
            table = op._device_tables[device_id] = cupy.asarray(op.table)
    return table
