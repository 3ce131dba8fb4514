"""Operators, one a file, each with its CPU implementation (and GPU one beside it).

Each module registers its operator when imported; ``_registry.load_all`` imports them all
(with ``readers`` and ``decoders``), and ``fn`` and ops are generated from that registry.
"""

from __future__ import annotations

import sys

from .._geometry import crop_window as _crop_window
from .._geometry import resize_params as _resize_params

# The old private paths of the shared arithmetic, now in ``_geometry`` (kept for code written
# against them: ``from dlpipe.operators._resize_params import ...``).
sys.modules[f"{__name__}._crop_window"] = _crop_window
sys.modules[f"{__name__}._resize_params"] = _resize_params
