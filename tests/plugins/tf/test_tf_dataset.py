"""``dlpipe.plugins.tf.DLPipeDataset``: a tf.data.Dataset over a pipeline.

Samples are 4-byte files holding their own index (``make_files``), so every batch is checked by
the exact ids it holds, against :class:`dlpipe.iterator.BaseIterator` over an identical pipeline
and against DALI's table. All TF tests live in this one module: TensorFlow is slow to import
and its logical CPU devices (for MirroredStrategy) must be set before its runtime starts.
"""

from __future__ import annotations

import logging
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

try:  # two logical CPUs for MirroredStrategy; only possible before TF's runtime starts
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
except RuntimeError:
    pass

from dlpipe import ArgumentError, Pipeline, PipelineError, fn, types  # noqa: E402
from dlpipe.iterator import BaseIterator, LastBatchPolicy  # noqa: E402
from dlpipe.plugins.tf import DALIDataset, DLPipeDataset  # noqa: E402

pytestmark = pytest.mark.tf

FILL, DROP, PARTIAL = LastBatchPolicy.FILL, LastBatchPolicy.DROP, LastBatchPolicy.PARTIAL


def reader_pipe(root, batch_size, shard_id=0, num_shards=1, pad=False, **pipe_kwargs):
    pipe = Pipeline(batch_size=batch_size, num_threads=1, device_id=None, seed=7, **pipe_kwargs)
    with pipe:
        data, label = fn.readers.file(
            file_root=root,
            shard_id=shard_id,
            num_shards=num_shards,
            pad_last_batch=pad,
            name="Reader",
        )
        pipe.set_outputs(data, label)
    return pipe


def image_pipe(root, batch_size, size=None, shard_id=0, num_shards=1):
    pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=None, seed=3)
    with pipe:
        jpegs, labels = fn.readers.file(
            file_root=root, shard_id=shard_id, num_shards=num_shards, name="Reader"
        )
        images = fn.decoders.image(jpegs, device="cpu")
        if size is not None:
            images = fn.resize(images, size=(size, size))
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="HWC", mean=[128.0], std=[64.0]
            )
        pipe.set_outputs(images, labels)
    return pipe


def ids(x) -> list[int]:
    arr = x.numpy() if hasattr(x, "numpy") else x
    return np.ascontiguousarray(arr).view(np.int32).reshape(-1).tolist()


def tf_epoch(ds) -> list[list[int]]:
    return [ids(data) for data, _ in ds]


def base_epoch(it) -> list[list[int]]:
    return [ids(step[0]["data"]) for step in it]


# --- a real tf.data.Dataset: structure, dtypes, shapes ------------------------------------------


def test_is_a_dataset_with_inferred_dtypes_and_shapes(make_files):
    root, _ = make_files(7)
    ds = DLPipeDataset(reader_pipe(root, 2), reader_name="Reader")
    assert isinstance(ds, tf.data.Dataset) and isinstance(ds, DLPipeDataset)
    assert ds.element_spec == (
        tf.TensorSpec((2, 4), tf.uint8),  # FILL with reader_name: every batch is full
        tf.TensorSpec((2, 1), tf.int32),
    )
    assert ds.batches_per_epoch == 4
    # The probe batch that inferred the specs is the first element: nothing lost.
    assert tf_epoch(ds) == [[0, 1], [2, 3], [4, 5], [6, 0]]

    partial = DLPipeDataset(reader_pipe(root, 2), reader_name="Reader", last_batch_policy=PARTIAL)
    assert [s.shape.as_list() for s in partial.element_spec] == [[None, 4], [None, 1]]
    endless = DLPipeDataset(reader_pipe(root, 2))
    assert endless.batches_per_epoch is None
    assert endless.cardinality() == tf.data.UNKNOWN_CARDINALITY


def test_output_map_single_dtype_and_squeezed_shapes(make_files):
    root, _ = make_files(4)
    named = DLPipeDataset(reader_pipe(root, 2), ["data", "label"], reader_name="Reader")
    first = next(iter(named))
    assert sorted(first) == ["data", "label"] and ids(first["data"]) == [0, 1]

    # DALI style: one dtype per output, label batches (B, 1) squeezed to the given (B,).
    ds = DALIDataset(
        reader_pipe(root, 2),
        (tf.uint8, tf.int32),
        ((2, 4), 2),
        reader_name="Reader",
        batch_size=2,
    )
    assert ds.element_spec[1] == tf.TensorSpec((2,), tf.int32)
    data, label = next(iter(ds))
    assert label.shape == (2,) and ids(data) == [0, 1]

    single = DLPipeDataset(
        one_output(root), output_dtypes=tf.uint8, output_shapes=(2, 4), reader_name="Reader"
    )
    assert single.element_spec == tf.TensorSpec((2, 4), tf.uint8)  # a tensor, not a tuple
    assert ids(next(iter(single))) == [0, 1]
    flat = DLPipeDataset(one_output(root), output_shapes=(None, 4))  # one output: one shape
    assert flat.element_spec == (tf.TensorSpec((None, 4), tf.uint8),)
    named_one = DLPipeDataset(one_output(root), "jpegs", tf.uint8)
    assert named_one.element_spec == {"jpegs": tf.TensorSpec((None, 4), tf.uint8)}


def one_output(root):
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        jpegs, _ = fn.readers.file(file_root=root, name="Reader")
        pipe.set_outputs(jpegs)
    return pipe


class FakeGpuBatch:
    """Stands in for a TensorListGPU (host memory behind it): enough for the conversion."""

    def __init__(self, array):
        self.array = array
        self.synced = False

    def __dlpack_device__(self):
        return (2, 0)

    def as_cpu(self):  # a TensorListCPU
        return SimpleNamespace(as_tensor=lambda: self.array, as_array=lambda: self.array)

    def as_tensor(self):  # a TensorGPU of the whole batch
        return self

    def as_cupy(self):
        self.synced = True
        return self.array

    def __dlpack__(self, stream=None):
        assert stream == -1 and self.synced  # the host waited for the batch first
        return self.array.__dlpack__()


def test_gpu_batch_conversion_branches():
    # The real GPU path cannot run in CI (no GPU) nor on the GPU machine (no TensorFlow).
    from dlpipe.plugins.tf.dataset import _gpu_batch_to_tf

    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert _gpu_batch_to_tf(FakeGpuBatch(arr), tf_has_gpu=False) is arr  # host copy
    through_dlpack = _gpu_batch_to_tf(FakeGpuBatch(arr), tf_has_gpu=True)
    assert isinstance(through_dlpack, tf.Tensor)
    np.testing.assert_array_equal(through_dlpack.numpy(), arr)


def test_unknown_dims_for_variable_size_images(image_root):
    ds = DLPipeDataset(
        image_pipe(image_root, 1),
        output_dtypes=(tf.uint8, tf.int32),
        output_shapes=((1, None, None, 3), (1, 1)),
        reader_name="Reader",
    )
    assert ds.element_spec[0].shape.as_list() == [1, None, None, 3]
    shapes = {tuple(images.shape) for images, _ in ds.take(8)}
    assert len(shapes) > 1 and all(s[0] == 1 and s[3] == 3 for s in shapes)

    # Shapes given, dtypes inferred: the probe batch must fit the given shapes.
    inferred = DLPipeDataset(
        image_pipe(image_root, 1), output_shapes=((1, None, None, 3), None), reader_name="Reader"
    )
    assert inferred.element_spec[0].dtype == tf.uint8
    assert inferred.element_spec[1].shape.rank is None


# --- epochs: exact samples per shard, as the base iterator gives them ------------------------------


@pytest.mark.parametrize(
    "policy, pad, want",
    [  # DALI's table, data [0..6], B=2: the last batch, then the next epoch's first
        (PARTIAL, True, ([6], [0, 1])),
        (PARTIAL, False, ([6], [1, 2])),
        (FILL, True, ([6, 6], [0, 1])),
        (FILL, False, ([6, 0], [1, 2])),
        (DROP, True, ([4, 5], [0, 1])),
        (DROP, False, ([4, 5], [1, 2])),
    ],
)
def test_dali_last_batch_table(make_files, policy, pad, want):
    root, _ = make_files(7)
    ds = DLPipeDataset(
        reader_pipe(root, 2, pad=pad), reader_name="Reader", last_batch_policy=policy
    )
    e0, e1 = tf_epoch(ds), tf_epoch(ds)
    assert (e0[-1], e1[0]) == want
    assert len(e0) == (3 if policy == DROP else 4)


@pytest.mark.parametrize("policy", [FILL, DROP, PARTIAL])
@pytest.mark.parametrize("pad", [True, False])
def test_epochs_per_shard_match_the_base_iterator(make_files, policy, pad):
    n, s, b = 10, 3, 2
    root, _ = make_files(n)
    for k in range(s):
        ds = DLPipeDataset(
            reader_pipe(root, b, k, s, pad=pad), reader_name="Reader", last_batch_policy=policy
        )
        ref = BaseIterator(
            reader_pipe(root, b, k, s, pad=pad),
            ["data", "label"],
            reader_name="Reader",
            last_batch_policy=policy,
        )
        got = [tf_epoch(ds) for _ in range(3)]
        assert got == [base_epoch(ref) for _ in range(3)], (k, got)
        if pad and policy == PARTIAL:  # one reader epoch = exactly this shard
            assert [x for batch in got[0] for x in batch] == list(
                range(n * k // s, n * (k + 1) // s)
            )


def test_given_specs_skip_the_probe_and_give_the_same_stream(make_files):
    root, _ = make_files(7)
    pipe = reader_pipe(root, 2)
    ds = DLPipeDataset(
        pipe,
        output_dtypes=(tf.uint8, tf.int32),
        output_shapes=((2, 4), (2, 1)),
        reader_name="Reader",
    )
    assert pipe.empty()  # nothing ran yet
    inferred = DLPipeDataset(reader_pipe(root, 2), reader_name="Reader")
    assert [tf_epoch(ds) for _ in range(2)] == [tf_epoch(inferred) for _ in range(2)]


def test_endless_without_reader_name_and_one_stream(make_files, caplog):
    root, _ = make_files(3)
    ds = DLPipeDataset(reader_pipe(root, 2))
    assert [ids(d) for d, _ in ds.take(3)] == [[0, 1], [2, 0], [1, 2]]
    assert [ids(d) for d, _ in ds.take(2)] == [[0, 1], [2, 0]]  # the stream goes on
    # With reader_name, an iteration stopped early leaves its epoch to the next one.
    root, _ = make_files(7)
    epoch = DLPipeDataset(reader_pipe(root, 2), reader_name="Reader")
    assert [ids(d) for d, _ in epoch.take(1)] == [[0, 1]]
    with caplog.at_level(logging.WARNING, logger="dlpipe.plugins.tf.dataset"):
        assert tf_epoch(epoch) == [[2, 3], [4, 5], [6, 0]]
    assert "continues the epoch" in caplog.text
    assert tf_epoch(epoch) == [[1, 2], [3, 4], [5, 6], [0, 1]]


def test_repeat_goes_through_epochs(make_files):
    root, _ = make_files(5)
    ds = DLPipeDataset(
        reader_pipe(root, 2, pad=True), reader_name="Reader", last_batch_policy=PARTIAL
    )
    assert [ids(d) for d, _ in ds.repeat(2)] == [[0, 1], [2, 3], [4], [0, 1], [2, 3], [4]]


def test_external_source_ends_the_iteration():
    batches = [np.full((2, 3), i, np.float32) for i in range(3)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(fn.external_source(source=batches, cycle="raise"))
    ds = DLPipeDataset(pipe)
    for _ in range(2):  # each iteration is one pass over the source
        assert [float(x[0][0, 0]) for x in ds] == [0.0, 1.0, 2.0]


# --- tf.data transformations, tf.function, Keras -------------------------------------------------


def test_map_prefetch_take_and_tf_function(make_files):
    root, _ = make_files(8)
    ds = DLPipeDataset(reader_pipe(root, 2), reader_name="Reader", last_batch_policy=DROP)
    mapped = ds.map(lambda d, lab: (tf.bitcast(d, tf.int32), lab)).prefetch(2)
    assert [x.numpy().tolist() for x, _ in mapped] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [x.numpy().tolist() for x, _ in mapped.take(2)] == [[0, 1], [2, 3]]  # next epoch

    @tf.function
    def total(dataset):
        acc = tf.constant(0, tf.int32)
        for x, _ in dataset:
            acc += tf.reduce_sum(tf.bitcast(x, tf.int32))
        return acc

    fresh = DLPipeDataset(reader_pipe(root, 2), reader_name="Reader", last_batch_policy=DROP)
    assert int(total(fresh)) == sum(range(8))
    assert int(total(fresh)) == sum(range(8))  # the next epoch (shard rotates onto itself)


def test_model_fit_a_few_steps(image_root):
    tf.keras.utils.set_random_seed(0)
    ds = DLPipeDataset(image_pipe(image_root, 8, size=16), reader_name="Reader")
    assert ds.element_spec[0] == tf.TensorSpec((8, 16, 16, 3), tf.float32)
    model = tf.keras.Sequential(
        [
            tf.keras.Input((16, 16, 3)),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(4),
        ]
    )
    model.compile(
        optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    history = model.fit(ds, epochs=2, verbose=0)  # 32 images: two epochs of 4 steps
    assert len(history.history["loss"]) == 2
    assert np.isfinite(history.history["loss"]).all()
    steps = model.fit(ds.repeat(), epochs=1, steps_per_epoch=3, verbose=0)
    assert np.isfinite(steps.history["loss"]).all()


def test_mirrored_strategy_one_pipeline_per_replica(make_files):
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(cpus) < 2:
        pytest.skip("TensorFlow started before two logical CPUs could be set up")
    root, _ = make_files(12)
    strategy = tf.distribute.MirroredStrategy(cpus[:2])
    made = []

    def dataset_fn(ctx):
        made.append((ctx.input_pipeline_id, ctx.num_input_pipelines))
        pipe = reader_pipe(
            root,
            ctx.get_per_replica_batch_size(4),
            shard_id=ctx.input_pipeline_id,
            num_shards=ctx.num_input_pipelines,
        )
        return DLPipeDataset(pipe, reader_name="Reader")

    options = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_fetch_to_device=False,
    )
    dist = strategy.distribute_datasets_from_function(dataset_fn, options)
    assert sorted(made) == [(0, 2), (1, 2)]
    steps = [[ids(x) for x in strategy.experimental_local_results(data)] for data, _ in dist]
    assert steps == [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [10, 11]]]

    @tf.function
    def step(data):
        return strategy.run(lambda d: tf.reduce_sum(tf.bitcast(d, tf.int32)), args=(data,))

    it = iter(dist)  # the next epoch: shards rotated
    data, _ = next(it)
    assert [int(v) for v in strategy.experimental_local_results(step(data))] == [13, 1]


def test_example_script_runs(image_root):
    # Keras model.fit under MirroredStrategy over two logical CPUs, fed by one pipeline per
    # replica. (One Keras fit under a strategy per process: a second one tripped TF's
    # collective ops, "Shape mismatch in the collective instance".)
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[3] / "examples" / "tf_distribute.py"
    spec = importlib.util.spec_from_file_location("tf_distribute_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if len(tf.config.list_logical_devices("CPU")) < 2:
        pytest.skip("TensorFlow started before two logical CPUs could be set up")
    loss = module.main(["--data", image_root, "--steps", "2", "--epochs", "1", "--size", "16"])
    assert np.isfinite(loss)


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=4), r"batch_size=4 does not agree with the pipeline's batch_size=2"),
        (dict(device_id=0), r"device_id=0 does not agree with the pipeline's device_id=None"),
        (dict(num_threads=3), r"num_threads=3 .* num_threads=1"),
        (dict(prefetch_queue_depth=5), r"prefetch_queue_depth=5 .* prefetch_queue_depth=2"),
        (
            dict(output_dtypes=(tf.uint8,)),
            r"output_dtypes=.* has 1 entries, but the pipeline has 2",
        ),
        (dict(output_dtypes=tf.uint8), r"single dtype, but the pipeline has 2 outputs"),
        (dict(output_dtypes=(tf.float32, tf.int32)), r"output_dtypes\[0\]=float32 does not match"),
        (dict(output_shapes=((2, 5), (2, 1))), r"output_shapes\[0\]=\(2, 5\) does not match"),
        (dict(output_dtypes=(tf.uint8, tf.int32), dtypes=(tf.uint8, tf.int32)), "deprecated"),
        (dict(output_shapes=((2, 4), (2, 1)), shapes=((2, 4), (2, 1))), "give only output_shapes"),
        (dict(reader_name="Nope"), "no reader named 'Nope'"),
        (dict(reader_name="Reader", last_batch_policy=7), "last_batch_policy=7"),
        (dict(output_map=["x", "x"]), "distinct"),
    ],
)
def test_argument_errors(make_files, kwargs, match):
    root, _ = make_files(4)
    with pytest.raises(ValueError, match=match):
        DLPipeDataset(reader_pipe(root, 2), **kwargs)


def test_type_and_device_errors(make_files, image_root):
    root, _ = make_files(4)
    with pytest.raises(TypeError, match="not a TensorFlow dtype"):
        DLPipeDataset(reader_pipe(root, 2), output_dtypes=("uint8x", tf.int32))
    with pytest.raises(TypeError, match="not a shape"):
        DLPipeDataset(reader_pipe(root, 2), output_shapes=("abc", (2, 1)))
    with pytest.raises(ArgumentError, match="one dlpipe Pipeline"):
        DLPipeDataset([reader_pipe(root, 2)])
    with tf.device("/gpu:0"), pytest.raises(ArgumentError, match="TF device and dlpipe device"):
        DLPipeDataset(reader_pipe(root, 2))
    with tf.device("/gpu:0"):
        DLPipeDataset(reader_pipe(root, 2), fail_on_device_mismatch=False)
    with tf.device("/cpu:0"):
        DLPipeDataset(reader_pipe(root, 2))
    # Samples of different shapes cannot form one tensor: the probe batch says so.
    with pytest.raises(PipelineError, match="same shape"):
        DLPipeDataset(image_pipe(image_root, 4), reader_name="Reader")


def test_deprecated_aliases_warn_and_work(make_files):
    root, _ = make_files(4)
    with pytest.warns(DeprecationWarning, match="dtypes is deprecated"):
        ds = DLPipeDataset(
            reader_pipe(root, 2), dtypes=(tf.uint8, tf.int32), shapes=((2, 4), (2, 1))
        )
    assert ds.element_spec[0] == tf.TensorSpec((2, 4), tf.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DLPipeDataset(reader_pipe(root, 2), output_dtypes=(tf.uint8, tf.int32))


# --- checkpoints -------------------------------------------------------------------------------


def ckpt_pipe(root, checkpoint=None, shuffle=True):
    """7 files in shuffled order (the reader's RNG and position are in the checkpoint)."""
    pipe = Pipeline(
        batch_size=2,
        num_threads=1,
        device_id=None,
        seed=5,
        enable_checkpointing=True,
        checkpoint=checkpoint,
    )
    with pipe:
        data, label = fn.readers.file(
            file_root=root, random_shuffle=shuffle, initial_fill=3, name="Reader"
        )
        pipe.set_outputs(data, label)
    return pipe


SPECS = dict(output_dtypes=(tf.uint8, tf.int32), output_shapes=((None, 4), (None, 1)))


def partial_epoch(ds, k: int) -> list[list[int]]:
    """The first ``k`` elements of an iteration, which then stops (``break``)."""
    out = []
    if k == 0:
        return out
    for data, _ in ds:
        out.append(ids(data))
        if len(out) == k:
            break
    return out


@pytest.mark.parametrize("specs", [False, True], ids=["probe", "specs"])
@pytest.mark.parametrize("policy", [FILL, PARTIAL])
@pytest.mark.parametrize("full, k", [(0, 0), (0, 1), (0, 3), (1, 0), (1, 2), (1, 4), (2, 0)])
def test_checkpoint_resumes_exactly(make_files, caplog, specs, policy, full, k):
    """``full`` whole epochs (for loops that ended), then ``k`` elements of the next (a loop
    stopped by ``break``; k=4 is every batch of the epoch, its end not seen yet): the restored
    dataset yields, loop by loop, what the original yields next, and the stream is the
    uninterrupted one."""
    root, _ = make_files(7)
    kwargs = dict(reader_name="Reader", last_batch_policy=policy, **(SPECS if specs else {}))
    ref = DLPipeDataset(ckpt_pipe(root), **kwargs)
    want = [tf_epoch(ref) for _ in range(full + 3)]
    assert [len(e) for e in want] == [4] * (full + 3)

    ds = DLPipeDataset(ckpt_pipe(root), **kwargs)
    head = [tf_epoch(ds) for _ in range(full)]
    part = partial_epoch(ds, k)
    assert head == want[:full] and part == want[full][:k]
    cps = ds.checkpoints()
    assert isinstance(cps, list) and len(cps) == 1 and isinstance(cps[0], bytes)

    restored = DLPipeDataset(ckpt_pipe(root, checkpoint=cps[0]), **kwargs)
    assert restored.element_spec == ds.element_spec
    with caplog.at_level(logging.WARNING, logger="dlpipe.plugins.tf.dataset"):
        got = [tf_epoch(restored) for _ in range(2)]
    assert "continues the epoch" not in caplog.text  # resuming is not an unfinished epoch
    assert got == [tf_epoch(ds) for _ in range(2)]  # what the original yields next
    if 0 < k < 4:  # the first iteration is the rest of the epoch
        assert got == [want[full][k:], want[full + 1]]
    else:
        nxt = full + (k == 4)
        assert got == want[nxt : nxt + 2]


@pytest.mark.parametrize("specs", [False, True], ids=["probe", "specs"])
def test_checkpoint_of_a_fresh_dataset_excludes_the_probe(make_files, specs):
    root, _ = make_files(7)
    kwargs = dict(reader_name="Reader", **(SPECS if specs else {}))
    ds = DLPipeDataset(ckpt_pipe(root), **kwargs)
    cps = ds.checkpoints()  # the probe batch (if any) is fetched, not yielded: not counted
    want = [tf_epoch(ds) for _ in range(2)]
    assert ds.checkpoints() != cps
    restored = DLPipeDataset(ckpt_pipe(root, checkpoint=cps[0]), **kwargs)
    assert [tf_epoch(restored) for _ in range(2)] == want
    # A checkpoint of the restored dataset before it yields anything is the same position.
    again = DLPipeDataset(ckpt_pipe(root, checkpoint=cps[0]), **kwargs)
    twice = DLPipeDataset(ckpt_pipe(root, checkpoint=again.checkpoints()[0]), **kwargs)
    assert [tf_epoch(twice) for _ in range(2)] == want


@pytest.mark.parametrize("specs", [False, True], ids=["probe", "specs"])
@pytest.mark.parametrize("k", [0, 1, 3, 5])
def test_checkpoint_of_an_endless_dataset(make_files, specs, k):
    root, _ = make_files(5)
    kwargs = SPECS if specs else {}
    want = [ids(d) for d, _ in DLPipeDataset(ckpt_pipe(root), **kwargs).take(k + 6)]
    ds = DLPipeDataset(ckpt_pipe(root), **kwargs)
    assert partial_epoch(ds, k) == want[:k]
    restored = DLPipeDataset(ckpt_pipe(root, checkpoint=ds.checkpoints()[0]), **kwargs)
    assert [ids(d) for d, _ in restored.take(6)] == want[k:]


def test_checkpoint_between_epochs_with_prefetch(make_files):
    """``.prefetch`` reads ahead only within an iteration: after a loop over it ended, the
    checkpoint is exact."""
    root, _ = make_files(7)
    ref = DLPipeDataset(ckpt_pipe(root), reader_name="Reader", last_batch_policy=PARTIAL)
    want = [tf_epoch(ref) for _ in range(3)]
    ds = DLPipeDataset(ckpt_pipe(root), reader_name="Reader", last_batch_policy=PARTIAL)
    assert tf_epoch(ds.prefetch(3)) == want[0]
    restored = DLPipeDataset(
        ckpt_pipe(root, checkpoint=ds.checkpoints()[0]),
        reader_name="Reader",
        last_batch_policy=PARTIAL,
    )
    assert [tf_epoch(restored.prefetch(3)) for _ in range(2)] == want[1:]


def test_checkpoints_need_enable_checkpointing(make_files):
    root, _ = make_files(4)
    for kwargs in ({}, SPECS):
        ds = DLPipeDataset(reader_pipe(root, 2), **kwargs)
        with pytest.raises(PipelineError, match="enable_checkpointing=True"):
            ds.checkpoints()
