"""``fn.shapes`` (and ``DataNode.shape()``): each sample's shape as a 1-D tensor (DALI's
``Shapes``)."""

from __future__ import annotations

import numpy as np

from ..graph import Operator, register
from ..kernels._batch import sample_list
from ..types import DALIDataType
from .cast import convert_sat, parse_dtype


@register(legacy=("Shapes",))
class Shapes(Operator):
    """Returns the shape of each input sample, as a 1-D tensor of ``ndim`` values.

    Args:
        dtype: the output type (default INT64); any numeric type.

    Example:
        >>> hw = fn.shapes(images)[0:2]     # (height, width) per sample
    """

    schema = "shapes"
    devices = ("cpu", "gpu")
    light = True

    def setup(self, *, dtype=DALIDataType.INT64) -> None:
        self.dtype = parse_dtype(dtype, self.schema)

    def output_layouts(self, input_layouts):
        return [""]

    def run_sample(self, inputs, args, param):
        return convert_sat(np.asarray(np.shape(inputs[0]), np.int64), self.dtype)

    def run_batch(self, inputs, args, params, stream):
        """GPU: the shapes are known on the host; one upload of an (N, ndim) array. The batch
        keeps its host copy (``SampleList._host``): a slice of it (NeMo's lengths,
        ``fn.slice(fn.shapes(x), 1, 1)``) is cut on the host and uploaded, with no copy
        kernel (``kernels.layout.slice_known``)."""
        import cupy

        shapes = np.asarray(inputs[0].shapes, np.int64)
        host = np.ascontiguousarray(convert_sat(shapes.reshape(len(shapes), -1), self.dtype))
        out = cupy.empty(host.shape, host.dtype)
        out.set(host, stream=stream)
        if not len(host):
            return out
        batch = sample_list().from_dense(out)
        host.flags.writeable = False
        batch._host = host
        return batch
