"""dlpipe: GPU-accelerated data-loading pipelines with a DALI-compatible API.

    >>> from dlpipe import pipeline_def, fn, types
    >>> from dlpipe.pipeline import Pipeline

``import dlpipe`` loads no deep-learning framework and no CUDA library; those load when a GPU
operator or a plugin is used.
"""

from __future__ import annotations

from . import fn, math, ops, types
from .errors import (
    ArgumentError,
    DataNotFoundError,
    DecodeError,
    DeviceError,
    DlpipeError,
    MissingExtraError,
    PipelineError,
)
from .operators.subscript import newaxis
from .pipeline import Pipeline, pipeline_def
from .tensors import TensorCPU, TensorGPU, TensorListCPU, TensorListGPU
from .visualize import show_images

__version__ = "0.1.0"

__all__ = [
    "ArgumentError",
    "DataNotFoundError",
    "DecodeError",
    "DeviceError",
    "DlpipeError",
    "MissingExtraError",
    "Pipeline",
    "PipelineError",
    "TensorCPU",
    "TensorGPU",
    "TensorListCPU",
    "TensorListGPU",
    "fn",
    "math",
    "newaxis",
    "ops",
    "pipeline_def",
    "show_images",
    "types",
]
