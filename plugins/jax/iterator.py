"""The JAX iterator: one dict of ``jax.Array`` per step, sharded over devices.

:class:`GenericIterator` is DALI's ``nvidia.dali.plugin.jax.DALIGenericIterator``: epochs, shards
and the last batch come from :class:`dlpipe.iterator.BaseIterator`; this module only turns each
pipeline's batch into an array on that pipeline's device and joins the per-pipeline batches
into one global array. :func:`data_iterator` builds the pipelines (one per device) for you.

Example:
    >>> import jax
    >>> from jax.sharding import Mesh, NamedSharding, PartitionSpec
    >>> from dlpipe import fn
    >>> from dlpipe.plugins.jax import data_iterator
    >>> mesh = Mesh(jax.devices(), ("batch",))
    >>> @data_iterator(output_map=["images", "labels"], reader_name="Reader",
    ...                sharding=NamedSharding(mesh, PartitionSpec("batch")))
    ... def loader(root, shard_id, num_shards):
    ...     jpegs, labels = fn.readers.file(file_root=root, shard_id=shard_id,
    ...                                     num_shards=num_shards, name="Reader")
    ...     return fn.resize(fn.decoders.image(jpegs), size=(32, 32)), labels
    >>> it = loader("/data/train", batch_size=64)   # global batch, split over the devices
    >>> batch = next(it)          # {"images": (64, 32, 32, 3) uint8, "labels": (64, 1) int32}
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dlpipe.errors import ArgumentError, require_extra
from dlpipe.iterator import BaseIterator, LastBatchPolicy
from dlpipe.pipeline import pipeline_def
from dlpipe.tensors import TensorListCPU

require_extra("jax", "jax")  # a missing JAX names the extra to install
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

# PositionalSharding was removed from newer JAX; accept it where it still exists.
PositionalSharding = getattr(jax.sharding, "PositionalSharding", None)
_SHARDINGS = (NamedSharding,) + ((PositionalSharding,) if PositionalSharding is not None else ())

__all__ = [
    "DALIGenericIterator",
    "GenericIterator",
    "LastBatchPolicy",
    "NONPADDING",
    "data_iterator",
]

NONPADDING = "is_nonpadding"
"""The ``output_map`` name that adds the padding mask to each returned dict (see
:class:`GenericIterator`)."""


def _is_jax_array(x) -> bool:
    return isinstance(x, jax.Array)


def _pad_rows(data, valid: int):
    """``data`` with rows ``valid:`` replaced by copies of row ``valid - 1``."""
    if valid >= data.shape[0]:
        return data
    if _is_jax_array(data):
        return data.at[valid:].set(data[valid - 1])
    out = data.copy()
    out[valid:] = data[valid - 1]
    return out


def _fill_rows(row, rows: int):
    """``rows`` copies of one sample (for a pipeline with no real sample in this step)."""
    if _is_jax_array(row):
        return jnp.broadcast_to(row, (rows, *row.shape))
    return np.ascontiguousarray(np.broadcast_to(row, (rows, *row.shape)))


def _put(data, device):
    """``data`` (numpy or jax) as a jax.Array on ``device`` (None: the default device,
    uncommitted)."""
    if device is None:
        return data if _is_jax_array(data) else jax.device_put(data)
    if _is_jax_array(data) and data.devices() == {device}:
        return data
    return jax.device_put(data, device)


class GenericIterator(BaseIterator):
    """Iterates over one or more pipelines and returns one dict ``{name: jax.Array}`` per step.

    Same arguments and defaults as DALI's JAX ``DALIGenericIterator`` (see
    :class:`dlpipe.iterator.BaseIterator` for ``size``, ``reader_name``, ``auto_reset``,
    ``last_batch_padded``, ``last_batch_policy`` and ``prepare_first_batch``).

    What a step returns, for a per-pipeline batch of B samples of shape S:

    * One pipeline, no ``sharding``: the pipeline's batch, shape (B, *S). A CPU pipeline
      (``device_id=None``) gives an uncommitted array on JAX's default device; a pipeline with
      a ``device_id`` is put on ``jax.local_devices()[device_id]``.
    * ``sharding`` (a ``NamedSharding``, or a ``PositionalSharding`` where JAX still has it):
      one global array of shape (G*B, *S), G = ``sharding.mesh.size`` (``sharding.shape[0]``
      for PositionalSharding), built with ``jax.make_array_from_single_device_arrays``. Each
      pipeline's batch is the shard on its device; the sharding must split the batch axis over
      all its devices. Under ``jax.distributed`` each process passes its own local pipelines
      (one per addressable device of the sharding) and gets its part of the global array.
    * Several pipelines, no ``sharding``: a leading device axis, shape (P, B, *S), sharded over
      the pipelines' devices (what ``jax.device_put_sharded`` gave, for ``pmap``), or stacked
      on one device when all pipelines share it.

    Pipeline ``i`` goes to ``devices[i]`` if given; else, on a GPU/TPU JAX, to
    ``jax.local_devices()[device_id]`` when its ``device_id`` is set; else to the i-th of the
    sharding's addressable devices (in ``jax.local_devices()`` order), or of
    ``jax.local_devices()``. CPU batches are copied there with ``jax.device_put``; GPU batches
    are taken zero-copy through DLPack (``jax.dlpack.from_dlpack``).

    ``last_batch_policy=PARTIAL`` is supported (DALI refuses it): shapes never change, so
    ``jit`` does not recompile. The last batch keeps its full shape; its padding rows repeat
    the pipeline's last real sample (a pipeline with no real sample left repeats another
    pipeline's last one), and :attr:`is_nonpadding` says which rows are real.

    Args:
        pipelines: one Pipeline or a list (one per device).
        output_map: one distinct name per pipeline output, in order. The extra name
            ``"is_nonpadding"`` (anywhere in the list, not counted as a pipeline output) adds the
            padding mask to every returned dict.
        size: samples per epoch (prefer ``reader_name``). Default -1.
        reader_name: the reader to size epochs from. Default None.
        auto_reset: reset at the end of each epoch. Default False.
        last_batch_padded: without ``reader_name``, whether the reader pads. Default False.
        last_batch_policy: FILL (default), DROP or PARTIAL.
        prepare_first_batch: run the pipelines in the constructor. Default True.
        sharding: a ``jax.sharding.NamedSharding`` (or ``PositionalSharding``) for the global
            batch, or None. Default None.
        devices: (dlpipe extension, keyword only) the JAX device of each pipeline.

    Attributes:
        is_nonpadding: for the batch last returned by ``next()``, a boolean jax.Array of the
            batch's leading shape ((G*B,), (P, B) or (B,)) with the batch's sharding: True for
            real samples, False for PARTIAL padding; None before the first ``next()``. Ask for
            ``"is_nonpadding"`` in ``output_map`` to get it inside the dict instead, which keeps
            it with its batch when another thread or a ``peek()`` takes the next one.

    Raises:
        ArgumentError: bad arguments (a ValueError), e.g. a sharding of another type, or not one
            pipeline per device of the sharding.

    Example:
        >>> it = GenericIterator(pipes, ["images", "labels"], reader_name="Reader",
        ...                      sharding=NamedSharding(mesh, PartitionSpec("batch")))
        >>> for batch in it:
        ...     state = train_step(state, batch["images"], batch["labels"])
    """

    def __init__(
        self,
        pipelines,
        output_map: Sequence[str],
        size: int = -1,
        reader_name: str | None = None,
        auto_reset: bool | str | None = False,
        last_batch_padded: bool = False,
        last_batch_policy: LastBatchPolicy | int | str = LastBatchPolicy.FILL,
        prepare_first_batch: bool = True,
        sharding=None,
        *,
        devices: Sequence[Any] | None = None,
    ):
        if pipelines is None:
            raise ArgumentError("pipelines=None: give one Pipeline or a list of them")
        pipes = list(pipelines) if isinstance(pipelines, list | tuple) else [pipelines]
        names = [output_map] if isinstance(output_map, str) else list(output_map)
        self._mask_entry = NONPADDING in names
        self._names = names
        outputs = [n for n in names if n != NONPADDING]
        if not outputs:
            raise ArgumentError(f"output_map={names!r} must name the pipeline outputs")
        if sharding is not None and not isinstance(sharding, _SHARDINGS):
            kinds = " or ".join(k.__name__ for k in _SHARDINGS)
            raise ArgumentError(f"sharding={sharding!r} must be a jax.sharding.{kinds}")
        self._sharding = sharding
        self._devices = self._pipeline_devices(pipes, sharding, devices)
        self._join = None  # (global_shape_fn, array sharding, mask sharding), made at first use
        self._true_masks: dict[int, Any] = {}
        self.is_nonpadding = None
        super().__init__(
            pipes,
            outputs,
            size=size,
            reader_name=reader_name,
            auto_reset=auto_reset,
            last_batch_padded=last_batch_padded,
            last_batch_policy=last_batch_policy,
            prepare_first_batch=prepare_first_batch,
        )

    # --- devices --------------------------------------------------------------------------
    @staticmethod
    def _pipeline_devices(pipes, sharding, devices) -> list:
        n = len(pipes)
        if devices is not None:
            devices = list(devices)
            if len(devices) != n:
                raise ArgumentError(
                    f"devices={devices!r} must name one device per pipeline ({n} pipelines)"
                )
            if sharding is not None:
                bad = [d for d in devices if d not in sharding.addressable_devices]
                if bad:
                    raise ArgumentError(f"devices {bad} are not devices of sharding={sharding!r}")
            return devices
        local = jax.local_devices()
        if sharding is not None:
            # In jax.local_devices() order of the sharding's platform (it may be the CPU while
            # JAX defaults to a GPU); addressable_devices is a set.
            platform = next(iter(sharding.addressable_devices)).platform
            order = {d: k for k, d in enumerate(jax.local_devices(backend=platform))}
            pool = sorted(sharding.addressable_devices, key=lambda d: (order.get(d, 1 << 30), d.id))
            if len(pool) != n:
                raise ArgumentError(
                    f"sharding={sharding!r} has {len(pool)} devices in this process, but "
                    f"{n} pipelines were given: give one pipeline per device"
                )
        else:
            pool = local
        on_accelerator = local[0].platform != "cpu"
        out = []
        for i, p in enumerate(pipes):
            dev_id = p.device_id
            if on_accelerator and dev_id is not None:
                if not 0 <= dev_id < len(local):
                    raise ArgumentError(
                        f"pipeline {i}: device_id={dev_id} is not one of the "
                        f"{len(local)} local JAX devices"
                    )
                dev = local[dev_id]
            elif sharding is None and n == 1:
                dev = None  # uncommitted, on the default device
            elif sharding is None and n > len(pool):
                dev = pool[0]  # more pipelines than devices: all on one, stacked
            else:
                dev = pool[i]
            if sharding is not None and dev not in sharding.addressable_devices:
                raise ArgumentError(
                    f"pipeline {i} (device_id={dev_id}) runs on {dev}, which is not a device "
                    f"of sharding={sharding!r}"
                )
            out.append(dev)
        return out

    # --- conversion -----------------------------------------------------------------------
    def _convert(self, tensorlist, pipeline) -> Any:
        if isinstance(tensorlist, TensorListCPU):
            return tensorlist.as_array()  # a fresh array each batch: never reused
        # Zero-copy: the buffer is not reused while a consumer can see it (DESIGN.md).
        return jax.dlpack.from_dlpack(tensorlist.as_tensor())

    def _cut(self, batch: dict[str, Any], rows: int) -> dict[str, Any]:
        """A PARTIAL batch keeps its full shape: :meth:`_assemble` pads and masks its tail."""
        return batch

    def _assemble(self, dicts: list[dict[str, Any]]) -> tuple[dict[str, Any], Any]:
        n = len(self._pipes)
        if self._policy == LastBatchPolicy.PARTIAL:
            # Real samples per pipeline in the step just fetched (_advance has counted it); the
            # base iterator left out the pipelines without any.
            valid = self._lefts(self._fetched - 1)
            present = [i for i, v in enumerate(valid) if v > 0]
        else:
            valid = [next(iter(d.values())).shape[0] for d in dicts]
            present = list(range(n))
        by_index = dict(zip(present, dicts, strict=True))
        rows = next(iter(dicts[0].values())).shape[0]
        out = {}
        for name in self.output_map:
            shards = []
            for i in range(n):
                if i in by_index:
                    data = _pad_rows(by_index[i][name], valid[i])
                else:  # no real sample left here: repeat the nearest pipeline's last one
                    donor = max((k for k in present if k < i), default=present[0])
                    s = by_index[donor][name]
                    data = _fill_rows(s[valid[donor] - 1], s.shape[0])
                shards.append(_put(data, self._devices[i]))
            out[name] = self._join_shards(shards)
        mask = self._mask(valid, rows)
        if self._mask_entry:
            out = {name: (mask if name == NONPADDING else out[name]) for name in self._names}
        return out, mask

    def _mask(self, valid: list[int], rows: int):
        if all(v >= rows for v in valid):
            if rows not in self._true_masks:
                self._true_masks[rows] = self._make_mask(valid, rows)
            return self._true_masks[rows]
        return self._make_mask(valid, rows)

    def _make_mask(self, valid: list[int], rows: int):
        shards = [
            _put(np.arange(rows) < v, dev) for v, dev in zip(valid, self._devices, strict=True)
        ]
        return self._join_shards(shards, mask=True)

    def _join_shards(self, shards: list, mask: bool = False):
        n = len(shards)
        if self._sharding is None and n == 1:
            return shards[0]
        if self._join is None:
            self._join = self._make_join(shards[0].shape[0])
        if self._join == "stack":
            dev = self._devices[0]
            return jnp.stack([_put(s, dev) for s in shards])
        groups, array_sharding, mask_sharding = self._join
        if self._sharding is None:  # a leading pipeline axis
            shape = (n, *shards[0].shape)
            shards = [s[None] for s in shards]
        else:
            shape = (groups * shards[0].shape[0], *shards[0].shape[1:])
        return jax.make_array_from_single_device_arrays(
            shape, mask_sharding if mask else array_sharding, shards
        )

    def _make_join(self, rows: int):
        """How per-pipeline batches become one array: ``"stack"`` or
        ``(groups, array sharding, 1-D mask sharding)``."""
        sharding = self._sharding
        if sharding is None:
            devs = self._devices
            if len(set(devs)) != len(devs):
                return "stack"
            stacked = NamedSharding(
                Mesh(np.array(devs), ("pipelines",)), PartitionSpec("pipelines")
            )
            return 1, stacked, stacked
        if isinstance(sharding, NamedSharding):
            groups = sharding.mesh.size
            spec = sharding.spec
            mask_sharding = NamedSharding(sharding.mesh, PartitionSpec(spec[0] if spec else None))
        else:  # PositionalSharding (older JAX)
            groups = sharding.shape[0]
            mask_sharding = sharding.reshape((sharding.shape[0],))
        if mask_sharding.shard_shape((groups * rows,))[0] != rows:
            raise ArgumentError(
                f"sharding={sharding!r} must split the batch axis into {groups} parts of "
                f"{rows} samples, one per pipeline (e.g. NamedSharding(mesh, "
                "PartitionSpec(<all mesh axes>)))"
            )
        return groups, sharding, mask_sharding

    # --- iteration ------------------------------------------------------------------------
    def _next_pair(self) -> tuple[dict[str, Any], Any]:
        return BaseIterator.__next__(self)

    def __next__(self) -> dict[str, Any]:
        batch, self.is_nonpadding = self._next_pair()
        return batch

    def next(self) -> dict[str, Any]:
        """The next batch (same as ``next(it)``)."""
        return self.__next__()


DALIGenericIterator = GenericIterator


# --- the decorator ------------------------------------------------------------------------------


def _iterator_decorator(
    iterator_cls: type,
    pipeline_fn: Callable | None,
    iterator_kwargs: dict,
    sharding,
    devices,
):
    if sharding is not None and devices is not None:
        raise ArgumentError(
            f"sharding={sharding!r} and devices={devices!r} exclude each other: give one"
        )
    if devices is not None:
        devices = list(devices)
        if not devices:
            raise ArgumentError("devices=[]: give at least one JAX device")

    def decorator(func: Callable):
        params = inspect.signature(func).parameters
        per_device = sharding is not None or devices is not None
        if per_device:
            missing = [k for k in ("shard_id", "num_shards") if k not in params]
            if missing:
                raise ArgumentError(
                    f"{func.__name__!r} must accept {' and '.join(missing)} with sharding= or "
                    "devices= (and pass them to its reader): one pipeline is made per device"
                )
        make_pipe = pipeline_def(func)

        @functools.wraps(func)
        def create_iterator(*args, checkpoints=None, **kwargs):
            kwargs.setdefault("num_threads", 4)
            if checkpoints is not None:
                checkpoints = list(checkpoints)
                kwargs["enable_checkpointing"] = True

            def restored(i: int) -> dict:
                if checkpoints is None:
                    return {}
                return {"checkpoint": checkpoints[i]}

            if not per_device:
                if "device_id" not in kwargs:
                    kwargs["device_id"] = 0 if jax.local_devices()[0].platform != "cpu" else None
                if checkpoints is not None and len(checkpoints) != 1:
                    raise ArgumentError(
                        f"checkpoints= has {len(checkpoints)} entries; this iterator has one "
                        "pipeline"
                    )
                pipes = [make_pipe(*args, **kwargs, **restored(0))]
                return iterator_cls(pipes, **iterator_kwargs, sharding=None)
            taken = [k for k in ("device_id", "shard_id", "num_shards") if k in kwargs]
            if taken:
                raise ArgumentError(
                    f"{taken} are set per device with sharding= or devices=; do not pass them"
                )
            if "batch_size" not in kwargs:
                raise ArgumentError("batch_size= (the global batch) is required")
            batch = kwargs.pop("batch_size")
            local = jax.local_devices()
            if sharding is not None:
                all_devices = jax.devices()
                devs = local
                shard_ids = [all_devices.index(d) for d in devs]
                num_shards = len(all_devices)
            else:
                if jax.process_count() > 1:
                    raise RuntimeError(
                        f"devices= works in a single process only (jax.process_count() = "
                        f"{jax.process_count()}); use sharding= under jax.distributed"
                    )
                devs = devices
                shard_ids = list(range(len(devs)))
                num_shards = len(devs)
            if isinstance(batch, bool) or not isinstance(batch, int) or batch % num_shards:
                raise ArgumentError(
                    f"batch_size={batch!r} (the global batch) must be a multiple of the "
                    f"{num_shards} devices"
                )
            if checkpoints is not None and len(checkpoints) != len(devs):
                raise ArgumentError(
                    f"checkpoints= has {len(checkpoints)} entries; give one per device "
                    f"({len(devs)}), as it.checkpoints() returns them"
                )
            pipes = []
            for i, (dev, shard_id) in enumerate(zip(devs, shard_ids, strict=True)):
                device_id = None if dev.platform == "cpu" else local.index(dev)
                pipes.append(
                    make_pipe(
                        *args,
                        batch_size=batch // num_shards,
                        device_id=device_id,
                        shard_id=shard_id,
                        num_shards=num_shards,
                        **kwargs,
                        **restored(i),
                    )
                )
            return iterator_cls(pipes, **iterator_kwargs, sharding=sharding, devices=devs)

        return create_iterator

    return decorator(pipeline_fn) if pipeline_fn is not None else decorator


def data_iterator(
    pipeline_fn: Callable | None = None,
    output_map: Sequence[str] = (),
    size: int = -1,
    reader_name: str | None = None,
    auto_reset: bool | str | None = False,
    last_batch_padded: bool = False,
    last_batch_policy: LastBatchPolicy | int | str = LastBatchPolicy.FILL,
    prepare_first_batch: bool = True,
    sharding=None,
    devices: Sequence[Any] | None = None,
):
    """Turn a graph-defining function into a function that returns a :class:`GenericIterator`.

    The function is made a ``pipeline_def``; call the result with the function's arguments
    and the Pipeline's (``batch_size``, ``num_threads`` (default 4), ``seed``, ...).

    * Neither ``sharding`` nor ``devices``: one pipeline, ``device_id`` 0 on a GPU/TPU JAX and
      None (CPU) on a CPU-only JAX, unless given.
    * ``sharding``: ``batch_size`` is the GLOBAL batch, divided by ``jax.device_count()``. One
      pipeline is made per ``jax.local_devices()`` entry, with ``device_id`` = its local index
      (None for CPU devices), ``shard_id`` = the device's index in ``jax.devices()`` and
      ``num_shards = jax.device_count()``. Under ``jax.distributed`` (call
      ``jax.distributed.initialize()`` first) every process runs this with the same arguments,
      builds the pipelines of its own devices (so each process reads the shards of its
      devices, ``jax.process_index()`` aside) and gets its part of the same global array.
    * ``devices``: one pipeline per listed device (``shard_id`` = position in the list,
      ``num_shards = len(devices)``, ``batch_size`` divided by it); the result has a leading
      device axis, for ``pmap``. Single process only (RuntimeError otherwise).

    With ``sharding`` or ``devices`` the function must accept ``shard_id`` and ``num_shards``
    and pass them to its reader.

    Args:
        pipeline_fn: the function (when used without parentheses or called directly).
        output_map, size, reader_name, auto_reset, last_batch_padded, last_batch_policy,
            prepare_first_batch, sharding: as for :class:`GenericIterator`.
        devices: JAX devices to run one pipeline each on. Default None.

    Raises:
        ArgumentError: ``sharding`` with ``devices`` (a ValueError), a function without
            ``shard_id``/``num_shards``, a global batch not divisible by the device count.
        RuntimeError: ``devices`` in a multi-process run.

    Example:
        >>> @data_iterator(output_map=["x", "y"], reader_name="Reader", sharding=sharding)
        ... def loader(root, shard_id, num_shards):
        ...     return fn.readers.file(file_root=root, shard_id=shard_id,
        ...                            num_shards=num_shards, name="Reader")
        >>> it = loader("/data", batch_size=32, num_threads=2)
    """
    return _iterator_decorator(
        GenericIterator,
        pipeline_fn,
        dict(
            output_map=output_map,
            size=size,
            reader_name=reader_name,
            auto_reset=auto_reset,
            last_batch_padded=last_batch_padded,
            last_batch_policy=last_batch_policy,
            prepare_first_batch=prepare_first_batch,
        ),
        sharding,
        devices,
    )
