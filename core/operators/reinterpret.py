"""``fn.reinterpret``: view every sample with another element type, shape and/or layout
(DALI's ``Reinterpret``: ``Reshape`` with a ``dtype``). The bytes are not copied.

With ``dtype`` and no new shape, the innermost extent is rescaled (its size in bytes must
divide by the new type's); with a shape, the samples must keep their size in bytes, and a
negative (wildcard) extent is inferred in units of the new type.
"""

from __future__ import annotations

from ..graph import register
from .cast import parse_dtype
from .reshape import Reshape

__all__ = ["Reinterpret"]


@register(legacy=("Reinterpret",))
class Reinterpret(Reshape):
    """Treats each sample's bytes as another type, shape and/or layout (no copy).

    Args:
        dtype: the output element type (default: the input's).
        shape, rel_shape, src_dims, layout: as in ``fn.reshape``.

    Example:
        >>> with pipe:
        ...     words = fn.reinterpret(raw_bytes, dtype=types.INT32)  # innermost extent / 4
    """

    schema = "reinterpret"
    _can_change_type = True

    def setup(self, *, dtype=None, shape=None, rel_shape=None, src_dims=None, layout=None) -> None:
        self._setup(shape, rel_shape, src_dims, layout, parse_dtype(dtype, self.schema))
