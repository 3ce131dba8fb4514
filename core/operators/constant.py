"""``fn.constant``: the same tensor for every sample (DALI's ``Constant``); what
``types.Constant`` builds for lists, arrays and explicit shapes."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import SMALL_ELEMENTS, Operator, Repeated, register
from ..types import DALIDataType
from .cast import convert_sat, parse_dtype


def _as_list(value, name: str) -> list | None:
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value.reshape(-1).tolist()
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, bool | int | float | np.generic):
        return [value]
    raise ArgumentError(f"constant: {name}={value!r} must be a number or a list of numbers")


@register(legacy=("Constant",))
class Constant(Operator):
    """Produces a batch of constant tensors: every sample is ``fdata`` (or ``idata``) shaped as
    ``shape``.

    Args:
        fdata: the values, for floating-point data (a number or a flat list).
        idata: the values, for integer data. Exactly one of ``fdata`` and ``idata`` is given.
        shape: the shape of each sample; if unset, the data is 1-D. A single value is
            broadcast to the whole shape.
        dtype: the output type; default FLOAT with ``fdata``, INT32 with ``idata``. Values are
            converted with rounding and saturation (DALI's ``ConvertSat``).
        layout: the layout of each sample (its length must match the shape's).

    Example:
        >>> mean = fn.constant(fdata=[0.485, 0.456, 0.406], layout="C")
    """

    schema = "constant"
    devices = ("cpu", "gpu")
    num_inputs = (0, 0)
    light = True
    same_each_batch = True  # (the executor may keep the batch of an array-only output)

    def setup(self, *, fdata=None, idata=None, shape=None, dtype=None, layout=None) -> None:
        f, i = _as_list(fdata, "fdata"), _as_list(idata, "idata")
        if (f is None) == (i is None):
            raise ArgumentError(
                "constant: exactly one of fdata and idata must be given "
                f"(got fdata={fdata!r}, idata={idata!r})"
            )
        data = f if f is not None else i
        default = DALIDataType.FLOAT if f is not None else DALIDataType.INT32
        self.dtype = parse_dtype(default if dtype is None else dtype, self.schema)
        if shape is None:
            shape = [len(data)]
        shape = [int(s) for s in np.atleast_1d(np.asarray(shape, np.int64))]
        if any(s < 0 for s in shape):
            raise ArgumentError(f"constant: shape={shape} has a negative extent")
        volume = int(np.prod(shape)) if shape else 1
        if len(data) not in (1, volume):
            raise ArgumentError(
                f"constant: the data has {len(data)} elements but shape={shape} holds "
                f"{volume}; give one value (broadcast) or exactly {volume}"
            )
        layout = layout or ""
        if layout and len(layout) != len(shape):
            raise ArgumentError(
                f"constant: layout={layout!r} does not match the {len(shape)}-D shape {shape}"
            )
        self.layout = layout
        src = np.asarray(data, np.float64 if f is not None else np.int64)
        if src.size == 1:
            src = np.broadcast_to(src.reshape(()), shape)
        value = convert_sat(src.reshape(shape), self.dtype)
        value = np.array(value, order="C")  # a copy; 0-d stays 0-d
        value.setflags(write=False)  # every sample and iteration shares it
        self.value = value
        self._gpu_value = None
        self._gpu_rows: dict = {}  # batch size -> the samples' pointers, shapes, strides

    def output_layouts(self, input_layouts):
        return [self.layout]

    def run_sample(self, inputs, args, param):
        return self.value

    def small_output_in(self, node) -> bool:
        return self.value.size <= SMALL_ELEMENTS

    def batch_level_in(self, node) -> bool:
        return True  # the same read-only array for every sample: no call per sample

    def run_batch_cpu(self, inputs, args, params):
        # every sample is the one read-only value; the batch as one array too (the operators
        # that stack their inputs take it: operators/_small.py), made anew each batch as
        # np.stack made it before, so that whoever takes it may keep or change it
        n = len(params)
        batch = np.empty((n, *self.value.shape), self.value.dtype)
        batch[...] = self.value
        return (Repeated([self.value] * n, batch),)

    def run_batch(self, inputs, args, params, stream):
        """GPU: the tensor is copied to the device once; every sample points at it."""
        import cupy

        from ..tensors_gpu import SampleList

        n = len(params)
        if self._gpu_value is None:
            dev = cupy.empty(self.value.shape, self.value.dtype)
            dev.set(self.value, stream=stream)
            self._gpu_value = dev
        dev = self._gpu_value
        rows = self._gpu_rows.get(n)
        if rows is None:  # every sample points at the one tensor: made once per batch size
            ndim = dev.ndim
            strides = np.array(dev.strides, np.int64) // max(1, dev.itemsize)
            rows = self._gpu_rows[n] = (
                np.full(n, dev.data.ptr, np.uint64),
                np.tile(np.array(dev.shape, np.int64), (n, 1)).reshape(n, ndim),
                np.tile(strides, (n, 1)).reshape(n, ndim),
            )
        # copies: each batch gets arrays of its own
        return SampleList.of_arrays(
            dev.dtype, rows[0].copy(), rows[1].copy(), rows[2].copy(), dev, dev.device.id
        )

    def batch_params(self, n: int):
        return [None] * n  # the GPU side takes the batch size from it
