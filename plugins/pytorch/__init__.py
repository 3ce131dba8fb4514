"""PyTorch plugin: dlpipe batches as ``torch.Tensor`` dicts, DALI-style.

The epoch, shard and last-batch logic is :class:`dlpipe.iterator.BaseIterator`'s; this module
only converts batches. CPU outputs become CPU tensors sharing the batch's memory (pinned when
``pin_memory=True``); GPU outputs reach torch zero-copy through DLPack, on
``cuda:<pipeline.device_id>``, with torch's current stream of that device waiting for the
pipeline's work (the host does not block).

A DALI script ports by changing its imports:

    >>> from dlpipe import fn, pipeline_def
    >>> from dlpipe.plugins.pytorch import DALIClassificationIterator, LastBatchPolicy
    >>> @pipeline_def(batch_size=32, num_threads=4, device_id=0)
    ... def pipe(shard_id, num_shards):
    ...     jpegs, labels = fn.readers.file(file_root="/data/train", shard_id=shard_id,
    ...                                     num_shards=num_shards, pad_last_batch=True,
    ...                                     random_shuffle=True, name="Reader")
    ...     images = fn.decoders.image(jpegs, device="mixed")
    ...     return fn.resize(images, size=(224, 224)), labels
    >>> shard_id, num_shards, device_id = distributed_shard()   # torchrun's RANK, WORLD_SIZE, ...
    >>> it = DALIClassificationIterator(pipe(shard_id, num_shards, device_id=device_id),
    ...                                 reader_name="Reader", auto_reset=True)
    >>> for batch in it:
    ...     images, labels = batch[0]["data"], batch[0]["label"]
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import numpy as np
import torch

from dlpipe.errors import ArgumentError, DeviceError
from dlpipe.iterator import BaseIterator, LastBatchPolicy, _user_stacklevel
from dlpipe.tensors import TensorListCPU

__all__ = [
    "ClassificationIterator",
    "DALIClassificationIterator",
    "DALIGenericIterator",
    "GenericIterator",
    "LastBatchPolicy",
    "distributed_shard",
]


class GenericIterator(BaseIterator):
    """Iterates over pipelines and returns a list with one ``{name: torch.Tensor}`` dict per
    pipeline (DALI's ``DALIGenericIterator``).

    Args:
        pipelines: one Pipeline or a list (one per GPU or shard).
        output_map: one distinct name per pipeline output, in order.
        size: samples per epoch over all pipelines; only without ``reader_name``. Default -1.
        reader_name: the reader whose metadata sizes the epochs (recommended). Default None.
        auto_reset: reset at the end of each epoch (``True``/``"yes"``) or not
            (``False``/``None``/``"no"``, the default).
        fill_last_batch: deprecated; True means FILL, False means PARTIAL.
        dynamic_shape: accepted for DALI compatibility and ignored.
        last_batch_padded: without ``reader_name``: whether the reader pads. Default False.
        last_batch_policy: FILL (default), DROP or PARTIAL; see
            :class:`dlpipe.iterator.BaseIterator` for exactly what each returns.
        prepare_first_batch: run and convert the first batch in the constructor. Default True.
        pin_memory: copy CPU outputs into pinned (page-locked) memory, for fast asynchronous
            ``.cuda(non_blocking=True)``. Without CUDA it warns and is ignored. Default False.

    CPU outputs share memory with the batch (a fresh array every iteration, never reused by
    the pipeline). Every output must be a dense batch (all samples of one shape).

    Example:
        >>> it = GenericIterator(pipe, ["images", "labels"], reader_name="Reader")
        >>> for (batch,) in it:
        ...     batch["images"].shape           # torch.Size([32, 224, 224, 3])
    """

    def __init__(
        self,
        pipelines,
        output_map: Sequence[str],
        size: int = -1,
        reader_name: str | None = None,
        auto_reset: bool | str | None = False,
        fill_last_batch: bool | None = None,
        dynamic_shape: bool = False,
        last_batch_padded: bool = False,
        last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
        prepare_first_batch: bool = True,
        pin_memory: bool = False,
    ):
        self._pin_memory = bool(pin_memory)
        if self._pin_memory and not torch.cuda.is_available():
            warnings.warn(
                "pin_memory=True but CUDA is not available: CPU outputs are not pinned",
                UserWarning,
                stacklevel=_user_stacklevel(),
            )
            self._pin_memory = False
        super().__init__(
            pipelines,
            output_map,
            size=size,
            reader_name=reader_name,
            auto_reset=auto_reset,
            fill_last_batch=fill_last_batch,
            last_batch_padded=last_batch_padded,
            last_batch_policy=last_batch_policy,
            prepare_first_batch=prepare_first_batch,
        )

    def _convert(self, tensorlist, pipeline) -> torch.Tensor:
        if isinstance(tensorlist, TensorListCPU):
            array = tensorlist.as_tensor()
            if not array.flags.writeable or any(s < 0 for s in array.strides):
                array = np.array(array)  # torch needs writable memory and positive strides
            tensor = torch.from_numpy(array)
            return tensor.pin_memory() if self._pin_memory else tensor
        # A GPU batch: torch.from_dlpack passes torch's current stream of the batch's device to
        # __dlpack__(stream=...), which makes that stream wait for the pipeline's work.
        tensor = torch.from_dlpack(tensorlist.as_tensor())
        device_id = pipeline.device_id
        if device_id is not None and tensor.device.index != device_id:
            raise DeviceError(
                f"a GPU output landed on {tensor.device}, but its pipeline has "
                f"device_id={device_id}"
            )
        return tensor


class ClassificationIterator(GenericIterator):
    """:class:`GenericIterator` for pipelines with two outputs, ``data`` and ``label``
    (DALI's ``DALIClassificationIterator``); same arguments, no ``output_map``."""

    def __init__(
        self,
        pipelines,
        size: int = -1,
        reader_name: str | None = None,
        auto_reset: bool | str | None = False,
        fill_last_batch: bool | None = None,
        dynamic_shape: bool = False,
        last_batch_padded: bool = False,
        last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
        prepare_first_batch: bool = True,
        pin_memory: bool = False,
    ):
        super().__init__(
            pipelines,
            ["data", "label"],
            size=size,
            reader_name=reader_name,
            auto_reset=auto_reset,
            fill_last_batch=fill_last_batch,
            dynamic_shape=dynamic_shape,
            last_batch_padded=last_batch_padded,
            last_batch_policy=last_batch_policy,
            prepare_first_batch=prepare_first_batch,
            pin_memory=pin_memory,
        )


DALIGenericIterator = GenericIterator
DALIClassificationIterator = ClassificationIterator


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ArgumentError(f"environment variable {name}={value!r} must be an integer") from None


def distributed_shard() -> tuple[int, int, int]:
    """This process's ``(shard_id, num_shards, device_id)`` for a one-pipeline-per-process run.

    Rank and world size come from an initialised ``torch.distributed`` process group, else from
    torchrun's ``RANK`` and ``WORLD_SIZE`` environment variables, else ``(0, 1)``. The device is
    ``LOCAL_RANK`` (torchrun), else the rank modulo the number of visible GPUs, else 0.

    Example:
        >>> shard_id, num_shards, device_id = distributed_shard()
        >>> pipe = my_pipeline(shard_id=shard_id, num_shards=num_shards, device_id=device_id)

    Raises:
        ArgumentError: a malformed environment variable, or a rank outside the world size.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank = _env_int("RANK") or 0
        world = _env_int("WORLD_SIZE") or 1
    if world < 1 or not 0 <= rank < world:
        raise ArgumentError(f"rank {rank} is not in [0, world size {world})")
    local = _env_int("LOCAL_RANK")
    if local is None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        local = rank % gpus if gpus else 0
    return rank, world, local
