"""``fn.get_property``: a sample's metadata as data (DALI's ``GetProperty``):
``key="source_info"`` (the file the sample came from) or ``key="layout"``, each as a 1-D
uint8 tensor of the string's bytes per sample."""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register

_KEYS = ("source_info", "layout")


@register(legacy=("GetProperty",))
class GetProperty(Operator):
    """Returns a property of each input sample as a 1-D uint8 tensor (the string's bytes).

    ``source_info`` is where the sample came from, as the pipeline's outputs report it
    (``TensorListCPU.source_info(i)``: the file of the pipeline's first reader); ``layout``
    is the input's layout string. Decode with ``bytes(arr).decode()``.

    Args:
        key: ``"source_info"`` or ``"layout"``.

    Example:
        >>> jpegs, labels = fn.readers.file(file_root=root)
        >>> names = fn.get_property(jpegs, key="source_info")
    """

    schema = "get_property"
    devices = ("cpu",)
    light = True
    # The executor puts each sample's source_info in the operator's params (executor.py).
    needs_source_info = True

    def setup(self, *, key=None) -> None:
        if key not in _KEYS:
            raise ArgumentError(f"{self.schema}: key={key!r} is not supported; use one of {_KEYS}")
        self.key = key
        self._layout = ""

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        return [""]

    def run_sample(self, inputs, args, param):
        text = self._layout if self.key == "layout" else (param or "")
        return np.frombuffer(text.encode(), np.uint8).copy()
