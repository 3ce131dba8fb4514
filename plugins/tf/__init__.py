"""TensorFlow plugin: :class:`DLPipeDataset`, a ``tf.data.Dataset`` fed by a dlpipe pipeline.

Example:
    >>> import tensorflow as tf
    >>> from dlpipe import fn, pipeline_def, types
    >>> from dlpipe.plugins.tf import DLPipeDataset
    >>> @pipeline_def(batch_size=8, num_threads=2, device_id=None)
    ... def pipe(root):
    ...     jpegs, labels = fn.readers.file(file_root=root, name="Reader")
    ...     images = fn.resize(fn.decoders.image(jpegs), size=(64, 64))
    ...     return fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="HWC"), labels
    >>> ds = DLPipeDataset(pipe("/data/train"), reader_name="Reader")  # one epoch per iteration
    >>> model.fit(ds.prefetch(2), epochs=3)                            # doctest: +SKIP

``DALIDataset`` is the same class with DALI's positional argument order.
"""

from __future__ import annotations

try:
    import tensorflow  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        'dlpipe.plugins.tf needs TensorFlow: pip install "dlpipe[tf]" (or tensorflow-cpu)'
    ) from e

from dlpipe.iterator import LastBatchPolicy

from .dataset import DALIDataset, DLPipeDataset

__all__ = ["DALIDataset", "DLPipeDataset", "LastBatchPolicy"]
