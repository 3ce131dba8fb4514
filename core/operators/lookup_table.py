"""``fn.lookup_table``: map integer inputs through a table (DALI's ``LookupTable``).

The table has 65536 entries (keys 0..65535): ``values[i]`` at ``keys[i]`` (a repeated key takes
its last value), ``default_value`` elsewhere, all converted to ``dtype`` (default FLOAT) with
DALI's ``ConvertSat``. Input values outside the table give ``default_value``. Integer inputs
only; the layout is kept.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..types import DALIDataType
from .cast import convert_sat, parse_dtype

__all__ = ["LookupTable"]

TABLE_SIZE = 0x10000


@register(legacy=("LookupTable",))
class LookupTable(Operator):
    """Maps every element through the table given by ``keys``/``values``.

    Args:
        keys: the table's keys, ints in [0, 65535].
        values: the value of each key (as many as ``keys``).
        default_value: the value of every other key (default 0.0).
        dtype: the output type (default FLOAT).

    Example:
        >>> with pipe:
        ...     remapped = fn.lookup_table(labels, keys=[1, 3], values=[10, 30], dtype=types.INT32)
    """

    schema = "lookup_table"
    devices = ("cpu", "gpu")

    def setup(self, *, keys=(), values=(), default_value=0.0, dtype=DALIDataType.FLOAT) -> None:
        who = self.schema
        keys = np.atleast_1d(np.asarray(keys if keys is not None else (), np.float64))
        values = np.atleast_1d(np.asarray(values if values is not None else (), np.float64))
        if keys.size and (
            not np.all(keys == np.round(keys)) or keys.min() < 0 or keys.max() >= TABLE_SIZE
        ):
            raise ArgumentError(
                f"{who}: keys should be integers in the range [0, {TABLE_SIZE - 1}]"
            )
        if keys.size != values.size:
            raise ArgumentError(
                f"{who}: keys size ({keys.size}) should match values size ({values.size})"
            )
        self.dtype = parse_dtype(dtype, who)
        table = np.full(TABLE_SIZE + 1, np.float32(default_value), np.float32)
        table[keys.astype(np.int64)] = values.astype(np.float32)  # the last repeat wins
        # The extra last entry is the default value, read for keys outside the table.
        self.table = convert_sat(table, self.dtype)
        self._device_tables: dict[int, object] = {}

    def _check(self, dtype) -> None:
        if np.dtype(dtype).kind not in "iu":
            raise ArgumentError(
                f"{self.schema}: unsupported input type {np.dtype(dtype)}: only integer inputs"
            )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check(x.dtype)
        wide = x.astype(np.int64)  # keys of any integer type; TABLE_SIZE fits none below 32 bits
        idx = np.where((wide >= 0) & (wide < TABLE_SIZE), wide, TABLE_SIZE)
        return self.table[idx]

    def run_batch(self, inputs, args, params, stream):
        import cupy

        from ..kernels._batch import as_samples
        from ..kernels.lookup_table import lookup_batch

        s = as_samples(inputs[0])
        self._check(s.dtype)
        table = self._device_tables.get(s.device_id)
        if table is None:
            with cupy.cuda.Device(s.device_id):
                table = cupy.asarray(self.table)  # once per device, then kept
            self._device_tables[s.device_id] = table
        return lookup_batch(s, table, stream=stream)
