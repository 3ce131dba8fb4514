"""``DLPipeDataset``: a real ``tf.data.Dataset`` whose elements are a pipeline's batches.

How it works: ``tf.data.Dataset.from_generator`` (with an ``output_signature`` of
``tf.TensorSpec``) over a Python generator that drives the pipeline through the framework-neutral
:class:`dlpipe.iterator.BaseIterator` (epochs, shards and the last batch are decided there,
once). :class:`DLPipeDataset` subclasses ``tf.data.Dataset`` around that generator dataset, so
``isinstance(ds, tf.data.Dataset)`` holds and every ``tf.data`` transformation, ``tf.function``,
Keras ``model.fit`` and ``tf.distribute`` take it as they take any dataset. No custom C++ op is
involved, hence the limits listed in the class docstring (a Python generator: in-process only,
not serializable into a SavedModel, one Python thread feeds it).
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.eager import context

from dlpipe.errors import ArgumentError
from dlpipe.iterator import BaseIterator, LastBatchPolicy
from dlpipe.pipeline import Pipeline

__all__ = ["DALIDataset", "DLPipeDataset"]

logger = logging.getLogger(__name__)

_KDL_CPU = 1  # DLPack device type of host memory


class _TFIterator(BaseIterator):
    """The base iterator over one pipeline, its batches converted for TensorFlow."""

    def __init__(self, *args: Any, tf_has_gpu: bool, **kwargs: Any):
        self._tf_has_gpu = tf_has_gpu
        super().__init__(*args, **kwargs)

    def _convert(self, tensorlist, pipeline) -> Any:
        if tensorlist.__dlpack_device__()[0] == _KDL_CPU:
            return tensorlist.as_array()  # numpy, zero-copy for a dense batch
        return _gpu_batch_to_tf(tensorlist, self._tf_has_gpu)

    def _assemble(self, dicts: list[dict[str, Any]]) -> dict[str, Any]:
        return dicts[0]  # one pipeline per dataset; a PARTIAL batch is never empty

    def _probe(self) -> dict[str, Any]:
        """Peek the first batch (held until ``next()`` takes it). An iterator restored at the
        end of an epoch starts the next one, and its checkpoints stay where it was restored."""
        try:
            return self._peek()
        except StopIteration:
            pre = self._pre_peek
            self.reset()
            batch = self._peek()
            self._pre_peek = pre
            return batch


def _gpu_batch_to_tf(tensorlist, tf_has_gpu: bool) -> Any:
    """A GPU batch as a TF tensor through DLPack where TF has a GPU, else a host numpy copy.

    The host waits for the batch's CUDA event first: TF reads the memory on streams of its
    own, which cannot be told to wait on ours. Untested: the GPU test machine has no
    TensorFlow.
    """
    if not tf_has_gpu:
        return tensorlist.as_cpu().as_array()
    dense = tensorlist.as_tensor()  # a TensorGPU holding the whole (N, ...) batch
    dense.as_cupy()  # synchronizes on the batch's event
    return tf.experimental.dlpack.from_dlpack(dense.__dlpack__(stream=-1))


def _alias(new_name: str, new: Any, old_name: str, old: Any) -> Any:
    if old is None:
        return new
    if new is not None:
        raise ArgumentError(
            f"{old_name}={old!r} and {new_name}={new!r} given together: {old_name} is the "
            f"deprecated spelling of {new_name}; give only {new_name}"
        )
    warnings.warn(f"{old_name} is deprecated: use {new_name}", DeprecationWarning, stacklevel=3)
    return old


def _to_dtype(value: Any, where: str) -> tf.dtypes.DType:
    try:
        return tf.as_dtype(value)
    except TypeError:
        raise TypeError(f"{where}={value!r} is not a TensorFlow dtype (e.g. tf.float32)") from None


def _to_shape(value: Any, where: str) -> tf.TensorShape:
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        value = [int(value)]  # DALI examples write a 1-D shape as (BATCH_SIZE)
    try:
        return tf.TensorShape(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"{where}={value!r} is not a shape (a tuple of ints and None, or None)"
        ) from None


def _per_output(value: Any, names: list[str], arg: str, single: bool, convert) -> list:
    """One converted entry per output, from a single value, a sequence or a name mapping."""
    if single:
        return [convert(value, arg)]
    if isinstance(value, Mapping):
        unknown = set(value) - set(names)
        missing = [n for n in names if n not in value]
        if unknown or missing:
            raise ArgumentError(
                f"{arg} keys {sorted(map(str, value))} must be the output names {names}"
            )
        return [convert(value[n], f"{arg}[{n!r}]") for n in names]
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise TypeError(f"{arg}={value!r} must be a tuple with one entry per output")
    if len(value) != len(names):
        raise ArgumentError(
            f"{arg}={value!r} has {len(value)} entries, but the pipeline has {len(names)} "
            f"outputs {names}"
        )
    return [convert(v, f"{arg}[{i}]") for i, v in enumerate(value)]


def _fit_rank(x: Any, rank: int | None) -> Any:
    """Drop size-1 axes (the last first, never the batch axis) until ``x`` has ``rank`` axes.

    DALI squeezes outputs this way to match ``output_shapes``: a label batch of shape (B, 1)
    fits the shape (B,). Anything that cannot fit is left for TensorFlow to report.
    """
    shape = list(x.shape)
    if rank is None or len(shape) <= rank:
        return x
    for axis in range(len(shape) - 1, 0, -1):
        if len(shape) == rank:
            break
        if shape[axis] == 1:
            del shape[axis]
    if len(shape) != rank:
        return x
    return x.reshape(shape) if isinstance(x, np.ndarray) else tf.reshape(x, shape)


def _check_device(pipeline: Pipeline, gpu_outputs: bool) -> None:
    """Refuse a ``tf.device`` scope that disagrees with the pipeline's device.

    A GPU scope must name the pipeline's GPU, and a pipeline with CPU outputs only must not
    sit under a GPU scope (DALI's rules). A GPU pipeline under a CPU scope is allowed, unlike
    in DALI: the generator's tensors reach TF on the host anyway (see ``DLPipeDataset``).
    """
    scope = context.context().device_name
    if not scope:
        return  # no tf.device scope: nothing to disagree with
    spec = tf.DeviceSpec.from_string(scope)
    if spec.device_type != "GPU":
        return
    where = f"tf.device({scope!r})"
    if not gpu_outputs:
        raise ArgumentError(
            f"TF device and dlpipe device mismatch: {where}, but the pipeline "
            f"(device_id={pipeline.device_id}) has CPU outputs only; create the dataset "
            "under a CPU device, or pass fail_on_device_mismatch=False"
        )
    if spec.device_index is not None and spec.device_index != pipeline.device_id:
        raise ArgumentError(
            f"TF device and dlpipe device mismatch: {where}, but the pipeline's GPU outputs "
            f"live on device_id={pipeline.device_id}; create the dataset under "
            f"tf.device('/gpu:{pipeline.device_id}'), or pass fail_on_device_mismatch=False"
        )


class DLPipeDataset(dataset_ops.UnaryUnchangedStructureDataset):
    """A ``tf.data.Dataset`` whose elements are the batches of one dlpipe pipeline.

    Example:
        >>> ds = DLPipeDataset(pipe, ["images", "labels"], reader_name="Reader")
        >>> ds.element_spec        # inferred from the first batch (which is not lost)
        {'images': TensorSpec(shape=(32, 224, 224, 3), dtype=tf.float32, name=None), ...}
        >>> for epoch in range(3):
        ...     for batch in ds.prefetch(1):    # one epoch of this pipeline's shard
        ...         train_step(batch["images"], batch["labels"])

    Elements are a tuple with one tensor per pipeline output; a dict ``{name: tensor}`` when
    ``output_map`` is given; a single tensor when ``output_dtypes`` is a single dtype (not a
    tuple), as in DALI.

    Args:
        pipeline: the :class:`~dlpipe.Pipeline` (one: under ``tf.distribute``, one dataset per
            input pipeline, see below). It is built here, under the "iterator" API type.
        output_map: names of the pipeline outputs, in order; elements become dicts. Default
            None: tuples.
        output_dtypes: one ``tf.DType`` per output (a tuple, or a mapping by name), or a single
            dtype for a one-output pipeline. None (default): inferred.
        output_shapes: one shape per output (tuples of ints and None; an int ``n`` is the 1-D
            shape ``(n,)``; None is an unknown rank). None dims allow batches whose sizes vary,
            e.g. variable-size images with ``batch_size=1``. A batch with extra size-1 axes is
            squeezed to fit (labels (B, 1) fit (B,)). None (default): inferred.
        fail_on_device_mismatch: refuse a ``tf.device`` scope that disagrees with the
            pipeline (``ArgumentError``): a GPU scope for a pipeline with CPU outputs only, or
            one naming a GPU other than the pipeline's ``device_id``. Default True.
        reader_name: the ``name=`` of the pipeline's reader. With it the dataset ends after one
            epoch of the pipeline's shard and iterating it again gives the next epoch (shards
            rotate unless ``stick_to_shard``). Without it the dataset is endless, as in DALI:
            give Keras ``steps_per_epoch``.
        last_batch_policy: :class:`~dlpipe.iterator.LastBatchPolicy` FILL (default), DROP or
            PARTIAL, with ``reader_name``: what the last batch of an epoch holds, exactly as
            in :class:`~dlpipe.iterator.BaseIterator`.
        auto_reset: as in ``BaseIterator``. A new iteration starts the next epoch either way.
        batch_size, num_threads, device_id, prefetch_queue_depth, cpu_prefetch_queue_depth,
            gpu_prefetch_queue_depth, exec_separated: DALI passes these to its TF op; here they
            come from the pipeline, and a value given must agree with it (``ArgumentError``
            naming both). Default None: not checked.
        exec_dynamic: accepted for DALI scripts; ignored.
        dtypes, shapes: deprecated spellings of ``output_dtypes`` and ``output_shapes``.

    Inference: when ``output_dtypes`` or ``output_shapes`` is missing, the constructor runs the
    pipeline for one batch and reads them off it. That batch is not lost: it is the first
    element the dataset yields, so the stream is exactly what iterating the pipeline directly
    gives. Inferred shapes are the batch's own, except the batch axis, which is None unless
    every batch is full (``reader_name`` with FILL or DROP); give ``output_shapes`` with None
    for dims that vary between batches. Given and inferred values must agree (checked here).

    Epochs: with ``reader_name`` one iteration is one epoch (``batches_per_epoch`` batches; with
    PARTIAL possibly one fewer, see ``BaseIterator``); without it the stream never ends (a
    pipeline whose ``external_source`` stops ends the iteration, and the next iteration starts
    the source's next epoch). The cardinality is unknown either way (see below for why).

    One stream: all iterations of the dataset (and of datasets derived from it) share the
    pipeline, unlike DALI's op, which builds a fresh pipeline for each iterator. An iteration
    stopped early (``.take(n)``, ``break``) leaves the epoch unfinished: the next iteration
    continues it where it stopped (with a logged warning), and batches a downstream
    ``.prefetch`` had read but nobody consumed are gone. Two iterations at the same time take
    turns on one stream. Keras ``model.fit`` under a distribution strategy stops an iteration
    early: before training it takes one element from an iterator of its own and drops it
    (Keras 3 ``_maybe_symbolic_build``), so the first epoch comes up short by a batch or two
    per replica. Hence no asserted cardinality (it would fail that epoch), and the advice for
    ``tf.distribute`` with Keras: ``.repeat()`` and ``steps_per_epoch``, as with DALI. Without a
    strategy, ``model.fit(ds, epochs=n)`` sees whole epochs (Keras 3 warns "Your input ran out
    of data" after the first one, whose length it learns then; use FILL or DROP so that every
    epoch has that length). DALI scripts that give ``steps_per_epoch`` to an endless
    ``DALIDataset``: leave ``reader_name`` out, or add ``.repeat()``.

    GPU pipelines: batches are handed to TF through DLPack (``tf.experimental.dlpack``) when TF
    sees a GPU, else copied to the host. A Python generator in ``tf.data`` always returns host
    tensors (TF copies the DLPack tensor back to the host when the generator's step returns),
    so a GPU batch does cross the host once and ``prefetch_to_device`` or ``tf.distribute``
    moves it back; keeping it on the GPU needs a custom C++ dataset op, which dlpipe does not
    have. This branch is untested: the GPU test machine has no TensorFlow.

    Other limits of the Python-generator design: the dataset lives in this process (no
    ``tf.data`` service, no SavedModel or TPU), and ``tf.train.Checkpoint`` does not save its
    position: :meth:`checkpoints` does (see there for when it is exact under read-ahead).

    tf.distribute (one pipeline per input pipeline):

        >>> def dataset_fn(ctx):
        ...     pipe = my_pipe(shard_id=ctx.input_pipeline_id,
        ...                    num_shards=ctx.num_input_pipelines,
        ...                    batch_size=ctx.get_per_replica_batch_size(global_batch))
        ...     return DLPipeDataset(pipe, reader_name="Reader")
        >>> dist = strategy.distribute_datasets_from_function(dataset_fn)  # doctest: +SKIP

    With ``tf.distribute.InputOptions(experimental_replication_mode=PER_REPLICA)``, one
    dataset per replica (``examples/tf_distribute.py``). Use FILL or DROP there: PARTIAL can
    give replicas different numbers of steps.

    Raises:
        ArgumentError: (a ValueError) bad or disagreeing arguments, named with their values.
        TypeError: a dtype or shape that is not one.
        PipelineError: from the probe batch (e.g. a batch whose samples differ in shape).
    """

    def __init__(
        self,
        pipeline: Pipeline,
        output_map: Sequence[str] | str | None = None,
        output_dtypes: Any = None,
        output_shapes: Any = None,
        *,
        fail_on_device_mismatch: bool = True,
        reader_name: str | None = None,
        last_batch_policy: LastBatchPolicy | int | str = LastBatchPolicy.FILL,
        auto_reset: bool | str | None = False,
        batch_size: int | None = None,
        num_threads: int | None = None,
        device_id: int | None = None,
        prefetch_queue_depth: int | dict | None = None,
        cpu_prefetch_queue_depth: int | None = None,
        gpu_prefetch_queue_depth: int | None = None,
        exec_separated: bool | None = None,
        exec_dynamic: bool | None = None,
        dtypes: Any = None,
        shapes: Any = None,
    ):
        output_dtypes = _alias("output_dtypes", output_dtypes, "dtypes", dtypes)
        output_shapes = _alias("output_shapes", output_shapes, "shapes", shapes)
        if not isinstance(pipeline, Pipeline):
            raise ArgumentError(
                f"pipeline={pipeline!r} must be one dlpipe Pipeline (one dataset per pipeline; "
                "under tf.distribute, one per input pipeline)"
            )
        for arg, given, actual in (
            ("batch_size", batch_size, pipeline.max_batch_size),
            ("num_threads", num_threads, pipeline.num_threads),
            ("device_id", device_id, pipeline.device_id),
            ("prefetch_queue_depth", prefetch_queue_depth, pipeline.prefetch_queue_depth),
            ("cpu_prefetch_queue_depth", cpu_prefetch_queue_depth, pipeline.cpu_queue_size),
            ("gpu_prefetch_queue_depth", gpu_prefetch_queue_depth, pipeline.gpu_queue_size),
            ("exec_separated", exec_separated, pipeline.exec_separated),
        ):
            if given is not None and given != actual:
                raise ArgumentError(
                    f"{arg}={given!r} does not agree with the pipeline's {arg}={actual!r}: "
                    f"the pipeline sets it (leave {arg} out, or make them equal)"
                )

        devices = pipeline.output_devices
        n_outputs = len(devices)
        gpu_outputs = "gpu" in devices
        if fail_on_device_mismatch:
            _check_device(pipeline, gpu_outputs)

        if output_map is None:
            names = [f"output_{i}" for i in range(n_outputs)]
        else:
            names = [output_map] if isinstance(output_map, str) else list(output_map)
        one_dtype = output_dtypes is not None and not isinstance(output_dtypes, Sequence | Mapping)
        if one_dtype and n_outputs != 1:
            raise ArgumentError(
                f"output_dtypes={output_dtypes!r} is a single dtype, but the pipeline has "
                f"{n_outputs} outputs: give a tuple of {n_outputs} dtypes"
            )
        # One output: a flat shape like (8, 28, 28) is its shape, not one shape per output.
        one_shape = one_dtype or (
            n_outputs == 1
            and isinstance(output_shapes, Sequence)
            and all(d is None or isinstance(d, int | np.integer) for d in output_shapes)
        )
        single = output_map is None and one_dtype  # elements are one tensor, not a tuple
        dtype_list = (
            None
            if output_dtypes is None
            else _per_output(output_dtypes, names, "output_dtypes", one_dtype, _to_dtype)
        )
        shape_list = (
            None
            if output_shapes is None
            else _per_output(output_shapes, names, "output_shapes", one_shape, _to_shape)
        )

        tf_has_gpu = gpu_outputs and bool(tf.config.list_logical_devices("GPU"))
        iterator = _TFIterator(
            pipeline,
            names,
            reader_name=reader_name,
            auto_reset=auto_reset,
            last_batch_policy=last_batch_policy,
            prepare_first_batch=False,
            tf_has_gpu=tf_has_gpu,
        )
        policy = iterator.last_batch_policy
        full_batches = reader_name is not None and policy != LastBatchPolicy.PARTIAL

        self._dlp_pipeline = pipeline
        self._dlp_iterator = iterator
        self._dlp_reader_name = reader_name
        # An iteration has begun (the probe counts). A dataset restored from a checkpoint
        # continues the stream it was taken from, so it counts as begun, without the warning
        # about an unfinished epoch (_dlp_quiet).
        restored = pipeline.is_restored_from_checkpoint
        self._dlp_started = restored
        self._dlp_quiet = restored
        self._dlp_epoch_done = False  # the last iteration ran to the end of its epoch
        self._dlp_names = names
        self._dlp_lock = threading.Lock()
        self._dlp_ranks: list[int | None] = [None] * len(names)
        if shape_list is not None:
            self._dlp_ranks = [s.rank for s in shape_list]

        if dtype_list is None or shape_list is None:
            # The probe batch stays in the iterator, not delivered (nor counted by checkpoints())
            # until the first iteration yields it.
            probe = iterator._probe()
            got = [_fit_rank(probe[n], r) for n, r in zip(names, self._dlp_ranks, strict=True)]
            got_dtypes = [tf.as_dtype(x.dtype) for x in got]
            if dtype_list is None:
                dtype_list = got_dtypes
            else:
                for i, (want, have) in enumerate(zip(dtype_list, got_dtypes, strict=True)):
                    if want != have:
                        raise ArgumentError(
                            f"output_dtypes[{i}]={want.name} does not match output "
                            f"{names[i]!r} of the pipeline, which is {have.name}"
                        )
            if shape_list is None:
                shape_list = [
                    tf.TensorShape(
                        [pipeline.max_batch_size if full_batches else None, *x.shape[1:]]
                    )
                    for x in got
                ]
            else:
                for i, (want, x) in enumerate(zip(shape_list, got, strict=True)):
                    if not want.is_compatible_with(x.shape):
                        raise ArgumentError(
                            f"output_shapes[{i}]={want} does not match output {names[i]!r} of "
                            f"the pipeline: its first batch has shape {tuple(x.shape)}"
                        )
        specs = [tf.TensorSpec(s, d) for s, d in zip(shape_list, dtype_list, strict=True)]
        if output_map is not None:
            self._dlp_structure = "dict"
            signature: Any = dict(zip(names, specs, strict=True))
        elif single:
            self._dlp_structure = "single"
            signature = specs[0]
        else:
            self._dlp_structure = "tuple"
            signature = tuple(specs)
        self.output_map = names if output_map is not None else None

        dataset = tf.data.Dataset.from_generator(self._dlp_generate, output_signature=signature)
        # TF (2.21) injects a prefetch of its own after the generator, which runs it ahead of
        # what was consumed; off, so that the dataset's own stream is exact for checkpoints().
        # The pipeline prefetches its batches anyway (prefetch_queue_depth).
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False
        dataset = dataset.with_options(options)
        super().__init__(dataset, dataset._variant_tensor)

    @property
    def pipeline(self) -> Pipeline:
        """The pipeline that feeds this dataset."""
        return self._dlp_pipeline

    @property
    def batches_per_epoch(self) -> int | None:
        """``len()`` of the base iterator with ``reader_name`` (PARTIAL: an epoch may have one
        fewer); None without ``reader_name`` (endless)."""
        if self._dlp_reader_name is None:
            return None
        return len(self._dlp_iterator)

    def _dlp_pack(self, batch: dict[str, Any]) -> Any:
        values = [
            _fit_rank(batch[n], r) for n, r in zip(self._dlp_names, self._dlp_ranks, strict=True)
        ]
        if self._dlp_structure == "dict":
            return dict(zip(self._dlp_names, values, strict=True))
        if self._dlp_structure == "single":
            return values[0]
        return tuple(values)

    def checkpoints(self) -> list[bytes]:
        """One checkpoint per pipeline (a list of one), holding the dataset's position too.

        To resume, build the same pipeline with ``checkpoint=cps[0]`` (and
        ``enable_checkpointing=True``) and a ``DLPipeDataset`` over it with the same arguments:
        iterating it continues with exactly the elements this dataset's generator would have
        produced next, epoch boundaries included (with ``reader_name``, if the checkpoint was
        taken in the middle of an epoch, the first iteration of the restored dataset is the
        rest of that epoch). A probe batch (see Inference) not yet yielded is not counted.

        The checkpoint counts what the generator produced, not what the training step
        consumed: TF's own read-ahead (``.prefetch(n)``, a ``.map``, which TF makes parallel
        by default, a ``tf.distribute`` input pipeline, Keras ``model.fit``) pulls elements
        ahead of the step, and those are not in the resumed stream. It is exact when taken
        between epochs (after a ``for`` loop over the dataset, or over anything derived from
        it, ended), or at any step while iterating the dataset itself without ``.prefetch``,
        ``.map`` or another transformation that reads ahead (TF's injected prefetch is turned
        off on this dataset for that reason).

        Raises:
            PipelineError: the pipeline was built without ``enable_checkpointing=True``.
        """
        with self._dlp_lock:
            return self._dlp_iterator.checkpoints()

    def _dlp_begin(self) -> dict[str, Any] | None:
        """Start an iteration (under the lock): its first batch if that is already fetched
        (the probe, or the rest of an unfinished epoch), else None."""
        it = self._dlp_iterator
        first = None
        if it._peeked is not None:  # the probe
            first = next(it)
        elif self._dlp_epoch_done:
            iter(it)  # the last iteration saw its epoch end: start the next one
        elif self._dlp_started:
            # An earlier iteration (or the dataset a checkpoint came from) stopped before it
            # saw the end of its epoch.
            try:
                first = next(it)
            except StopIteration:  # it had taken every batch: start the next epoch
                iter(it)
            else:
                if self._dlp_reader_name is not None and not self._dlp_quiet:
                    logger.warning(
                        "a new iteration of DLPipeDataset continues the epoch that an "
                        "earlier iteration left unfinished (reader %r)",
                        self._dlp_reader_name,
                    )
        self._dlp_started = True
        self._dlp_quiet = False
        self._dlp_epoch_done = False
        return first

    def _dlp_generate(self):
        """One iteration of the dataset: the next epoch, or the rest of an unfinished one."""
        it = self._dlp_iterator
        with self._dlp_lock:
            first = self._dlp_begin()
        if first is not None:
            yield self._dlp_pack(first)
        while True:
            with self._dlp_lock:
                try:
                    batch = next(it)
                except StopIteration:
                    self._dlp_epoch_done = True
                    return
            yield self._dlp_pack(batch)


class DALIDataset(DLPipeDataset):
    """:class:`DLPipeDataset` under DALI's name, with DALI's positional order:
    ``DALIDataset(pipeline, output_dtypes=None, output_shapes=None,
    fail_on_device_mismatch=True, *, ...)``. Every keyword of ``DLPipeDataset`` works.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        output_dtypes: Any = None,
        output_shapes: Any = None,
        fail_on_device_mismatch: bool = True,
        **kwargs: Any,
    ):
        super().__init__(
            pipeline,
            kwargs.pop("output_map", None),
            output_dtypes,
            output_shapes,
            fail_on_device_mismatch=fail_on_device_mismatch,
            **kwargs,
        )
