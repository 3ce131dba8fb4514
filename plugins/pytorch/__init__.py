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

import ctypes
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dlpipe.errors import ArgumentError, DeviceError
from dlpipe.iterator import BaseIterator, LastBatchPolicy, _user_stacklevel
from dlpipe.tensors import TensorCPU, TensorListCPU
from dlpipe.types import DALIDataType

__all__ = [
    "ClassificationIterator",
    "DALIClassificationIterator",
    "DALIGenericIterator",
    "DALIRaggedIterator",
    "GenericIterator",
    "LastBatchPolicy",
    "RaggedIterator",
    "distributed_shard",
    "feed_ndarray",
    "to_torch_type",
]

#: DALI data type -> torch dtype (DALI's ``to_torch_type``).
to_torch_type = {
    DALIDataType.FLOAT: torch.float32,
    DALIDataType.FLOAT64: torch.float64,
    DALIDataType.FLOAT16: torch.float16,
    DALIDataType.UINT8: torch.uint8,
    DALIDataType.INT8: torch.int8,
    DALIDataType.BOOL: torch.bool,
    DALIDataType.INT16: torch.int16,
    DALIDataType.INT32: torch.int32,
    DALIDataType.INT64: torch.int64,
}


def feed_ndarray(dali_tensor, arr: torch.Tensor, cuda_stream: Any = None) -> torch.Tensor:
    """Copy a dlpipe tensor or batch into the torch tensor ``arr`` (DALI's ``feed_ndarray``).

    Args:
        dali_tensor: a ``TensorCPU``/``TensorGPU`` (a sample, or ``as_tensor()`` of a batch) or
            a ``TensorListCPU``/``TensorListGPU`` (its samples one after the other).
        arr: the destination: contiguous, of the same dtype and, for a tensor, shape; on the
            GPU for GPU data, in host memory for CPU data.
        cuda_stream: for GPU data, the stream to copy on (a ``torch.cuda.Stream``, a raw
            ``cudaStream_t`` or None). Given, the copy is asynchronous on it; None copies on the
            producer's stream and waits for the copy.

    Returns:
        ``arr``.

    Raises:
        ArgumentError: dtype or shape mismatch, or a non-contiguous destination.

    Example:
        >>> t = batch.as_tensor()
        >>> out = torch.empty(t.shape(), dtype=to_torch_type[t.dtype], device="cuda")
        >>> feed_ndarray(t, out, cuda_stream=torch.cuda.current_stream())
    """
    want = to_torch_type.get(dali_tensor.dtype)
    if want != arr.dtype:
        raise ArgumentError(
            "The element type of DALI Tensor/TensorList doesn't match the element type of the "
            f"target PyTorch Tensor: {want} vs {arr.dtype}"
        )
    shape = dali_tensor.shape()
    if isinstance(shape, list) and shape and isinstance(shape[0], tuple):  # a batch
        elements = sum(int(np.prod(s)) for s in shape)
        if elements != arr.numel():
            raise ArgumentError(
                f"Shapes do not match: the DALI TensorList holds {elements} elements, but the "
                f"PyTorch Tensor has size {list(arr.size())}"
            )
    elif list(shape) != list(arr.size()):
        raise ArgumentError(
            f"Shapes do not match: DALI tensor has size {list(shape)}, but PyTorch Tensor has "
            f"size {list(arr.size())}"
        )
    if not arr.is_contiguous():
        raise ArgumentError("feed_ndarray: the destination PyTorch Tensor must be contiguous")
    pointer = ctypes.c_void_p(arr.data_ptr())
    if isinstance(dali_tensor, TensorCPU | TensorListCPU):
        dali_tensor.copy_to_external(pointer)
    else:
        stream = getattr(cuda_stream, "cuda_stream", cuda_stream)
        dali_tensor.copy_to_external(pointer, stream, non_blocking=cuda_stream is not None)
    return arr


def to_torch(tensorlist) -> torch.Tensor:
    """A pipeline output (a dense batch) as one torch tensor, without a copy where torch
    allows it. A GPU batch goes through DLPack: torch passes its current stream to
    ``__dlpack__(stream=...)``, which makes that stream wait for the pipeline's work."""
    if isinstance(tensorlist, TensorListCPU):
        array = tensorlist.as_array()
        if not array.flags.writeable or any(s < 0 for s in array.strides):
            array = np.array(array)  # torch needs writable memory and positive strides
        return torch.from_numpy(array)
    return torch.from_dlpack(tensorlist.as_tensor())


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
        tensor = to_torch(tensorlist)
        if isinstance(tensorlist, TensorListCPU):
            return tensor.pin_memory() if self._pin_memory else tensor
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


class RaggedIterator(GenericIterator):
    """:class:`GenericIterator` whose outputs may hold samples of different shapes (DALI's
    ``DALIRaggedIterator``): each output is converted by its tag in ``output_types``.

    * ``DENSE_TAG`` (``"dense"``, the default for every output): one tensor, as
      :class:`GenericIterator` gives it.
    * ``SPARSE_LIST_TAG`` (``"sparse_list"``): a list with one tensor per sample (views of the
      batch's memory on the CPU; DLPack views on the GPU).
    * ``SPARSE_COO_TAG`` (``"sparse_coo"``): one ``torch.sparse_coo_tensor`` whose indices are
      (sample, row) and whose values are the samples' rows one after the other (samples with
      more than one dimension give a hybrid tensor with dense trailing dimensions); its size is
      inferred from the indices, as in DALI.

    Args:
        output_types: one tag per output (None: all dense). The other arguments are
            :class:`GenericIterator`'s, in DALI's order (``output_types`` comes after
            ``reader_name``).

    Example:
        >>> it = DALIRaggedIterator(pipe, ["images", "boxes", "labels"], reader_name="Reader",
        ...                         output_types=[DALIRaggedIterator.DENSE_TAG,
        ...                                       DALIRaggedIterator.SPARSE_LIST_TAG,
        ...                                       DALIRaggedIterator.SPARSE_LIST_TAG])
        >>> for (batch,) in it:
        ...     boxes_of_sample_0 = batch["boxes"][0]        # torch.Size([k0, 4])

    Raises:
        ArgumentError: an unknown tag, or not one tag per output.
    """

    DENSE_TAG: str = "dense"
    SPARSE_LIST_TAG: str = "sparse_list"
    SPARSE_COO_TAG: str = "sparse_coo"

    def __init__(
        self,
        pipelines,
        output_map: Sequence[str],
        size: int = -1,
        reader_name: str | None = None,
        output_types: Sequence[str] | None = None,
        auto_reset: bool | str | None = False,
        fill_last_batch: bool | None = None,
        dynamic_shape: bool = False,
        last_batch_padded: bool = False,
        last_batch_policy: LastBatchPolicy = LastBatchPolicy.FILL,
        prepare_first_batch: bool = True,
        pin_memory: bool = False,
    ):
        tags = (self.DENSE_TAG, self.SPARSE_LIST_TAG, self.SPARSE_COO_TAG)
        names = list(output_map)
        if output_types is None:
            types = [self.DENSE_TAG] * len(names)
        else:
            types = list(output_types)
            bad = [t for t in types if t not in tags]
            if bad:
                raise ArgumentError(
                    f"output_types={list(output_types)!r}: {bad[0]!r} is not one of {tags}"
                )
            if len(types) != len(names):
                raise ArgumentError(
                    f"output_types={types!r} has {len(types)} tags for {len(names)} outputs "
                    f"({names})"
                )
        self._types = dict(zip(names, types, strict=True))
        super().__init__(
            pipelines,
            names,
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

    def _sample(self, tensorlist, i: int) -> torch.Tensor:
        if isinstance(tensorlist, TensorListCPU):
            array = tensorlist.at(i)
            if not array.flags.writeable or any(s < 0 for s in array.strides):
                array = np.array(array)
            tensor = torch.from_numpy(array)
            return tensor.pin_memory() if self._pin_memory else tensor
        return torch.from_dlpack(tensorlist[i])

    def _convert_output(self, name: str, tensorlist, pipeline):
        tag = self._types[name]
        if tag == self.DENSE_TAG:
            return self._convert(tensorlist, pipeline)
        samples = [self._sample(tensorlist, i) for i in range(len(tensorlist))]
        if tag == self.SPARSE_LIST_TAG:
            return samples
        return _sparse_coo(samples)

    def _cut(self, batch: dict, rows: int) -> dict:
        out = {}
        for name, t in batch.items():
            if isinstance(t, torch.Tensor) and t.is_sparse:
                t = t.coalesce()
                keep = t.indices()[0] < rows
                out[name] = torch.sparse_coo_tensor(
                    t.indices()[:, keep], t.values()[keep], (rows, *t.shape[1:])
                )
            else:
                out[name] = t[:rows]
        return out


def _sparse_coo(samples: list[torch.Tensor]) -> torch.Tensor:
    """Samples as a sparse COO tensor: index (sample i, row j) holds row j of sample i."""
    rows = [s.reshape(1) if s.dim() == 0 else s for s in samples]
    values = torch.cat(rows) if rows else torch.empty(0)
    sample_idx = (
        torch.cat([torch.full((len(r),), i, dtype=torch.int64) for i, r in enumerate(rows)])
        if rows
        else torch.empty(0, dtype=torch.int64)
    )
    row_idx = (
        torch.cat([torch.arange(len(r), dtype=torch.int64) for r in rows])
        if rows
        else torch.empty(0, dtype=torch.int64)
    )
    indices = torch.stack([sample_idx, row_idx]).to(values.device)
    return torch.sparse_coo_tensor(indices, values)


DALIGenericIterator = GenericIterator
DALIClassificationIterator = ClassificationIterator
DALIRaggedIterator = RaggedIterator


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


def __getattr__(name: str):
    """``experimental`` (with its ``proxy``), imported when first used: DALI 2.4's
    ``nvidia.dali.plugin.pytorch`` imports it with itself, so that
    ``nvidia.dali.plugin.pytorch.experimental.proxy.DALIServer`` works after a plain
    ``import nvidia.dali.plugin.pytorch``; here the iterators' users do not pay for it."""
    if name == "experimental":
        import importlib

        return importlib.import_module(f"{__name__}.experimental")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
