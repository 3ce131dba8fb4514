"""``fn.element_extract``: single elements (frames) of sequences (DALI's ``ElementExtract``).

One output per entry of ``element_map``: output ``k`` holds element ``element_map[k]`` of the
outermost axis of each sample. The input layout, when set, must start with ``F``; the outputs
have the rest of it (FHWC -> HWC). The outputs are views of the input (on the GPU too: the same
device memory, no copy).
"""

from __future__ import annotations

from ..errors import ArgumentError
from ..graph import Operator, register
from ._tensor_args import int_list

__all__ = ["ElementExtract"]


@register(legacy=("ElementExtract",))
class ElementExtract(Operator):
    """Extracts elements ``element_map`` of the outermost (``F``) axis: one output each.

    Args:
        element_map: indices of the elements to extract (required).

    Example:
        >>> with pipe:
        ...     first, last = fn.element_extract(frames, element_map=[0, 7])
    """

    schema = "element_extract"
    devices = ("cpu", "gpu")

    def setup(self, *, element_map=None) -> None:
        self.element_map = int_list(element_map, self.schema, "element_map", allow_none=False)
        if not self.element_map:
            raise ArgumentError(f"{self.schema}: element_map must hold at least one index")
        self.num_outputs = len(self.element_map)

    def output_layouts(self, input_layouts):
        layout = input_layouts[0] if input_layouts else ""
        if layout and layout[0] != "F":
            raise ArgumentError(
                f"{self.schema}: the input layout {layout!r} must begin with 'F' (a sequence)"
            )
        return [layout[1:]] * self.num_outputs

    def _check(self, shape, i: int = 0) -> None:
        if len(shape) < 1:
            raise ArgumentError(f"{self.schema}: sample {i} is a scalar, not a sequence")
        for k in self.element_map:
            if not 0 <= k < shape[0]:
                raise ArgumentError(
                    f"{self.schema}: element_map index {k} is out of range for a sequence of "
                    f"{int(shape[0])} elements (sample {i})"
                )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        self._check(x.shape)
        return tuple(x[k] for k in self.element_map)

    def run_batch(self, inputs, args, params, stream):
        import numpy as np

        from ..kernels._batch import as_samples
        from ..tensors_gpu import SampleList

        s = as_samples(inputs[0])
        for i, shape in enumerate(s.shapes):
            self._check(shape, i)
        item = np.int64(s.dtype.itemsize)
        outs = []
        for k in self.element_map:
            offset = (np.int64(k) * s.strides[:, 0] * item).astype(np.uint64)
            outs.append(
                SampleList(
                    s.dtype,
                    s.ptrs + offset,
                    s.shapes[:, 1:],
                    s.strides[:, 1:],
                    s.owners,
                    s.device_id,
                )
            )
        return tuple(outs) if len(outs) > 1 else outs[0]
