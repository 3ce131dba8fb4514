"""``dlpipe.backend``: where DALI's ``nvidia.dali.backend`` names live (the tensor classes).

``TensorListGPU`` and ``TensorGPU`` import without CuPy (see ``tensors.py``); making one
needs CuPy.
"""

from __future__ import annotations

from .tensors import TensorCPU, TensorGPU, TensorListCPU, TensorListGPU

__all__ = ["TensorCPU", "TensorGPU", "TensorListCPU", "TensorListGPU"]
