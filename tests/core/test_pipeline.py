"""The Pipeline API: the ways to define a graph, build/run/schedule, queue depths, API types,
seeds, reader metadata and errors."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from conftest import sample_ids
from dlpipe import ArgumentError, Pipeline, PipelineError, fn, ops, pipeline_def


def test_import_loads_no_framework_or_cuda_library():
    code = (
        "import dlpipe, dlpipe.fn, dlpipe.ops, sys;"
        "print(sorted({'torch','tensorflow','jax','cupy','nvidia.nvimgcodec'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_pipeline_def_routes_keywords(make_files):
    root, _ = make_files(8)

    @pipeline_def(batch_size=2, seed=3)
    def pipe_fn(file_root, shard_id=0):
        data, _ = fn.readers.file(file_root=file_root, shard_id=shard_id, num_shards=2)
        return data

    # num_threads and device_id go to the Pipeline; shard_id to the function; call-time
    # batch_size overrides the decorator's.
    pipe = pipe_fn(root, shard_id=1, num_threads=1, device_id=0, batch_size=4)
    assert (pipe.max_batch_size, pipe.num_threads, pipe.device_id, pipe.seed) == (4, 1, 0, 3)
    assert sample_ids(pipe.run()[0]) == [4, 5, 6, 7]


def test_pipeline_def_shadowing_argument_warns_and_goes_to_function(make_files):
    root, _ = make_files(4)

    @pipeline_def(batch_size=2, num_threads=1)
    def pipe_fn(seed):
        data, _ = fn.readers.file(file_root=root, random_shuffle=True, seed=seed)
        return data

    with pytest.warns(UserWarning, match="shadows"):
        first = pipe_fn(seed=11)
    with pytest.warns(UserWarning, match="shadows"):
        second = pipe_fn(seed=11)
    # the reader got seed=11 both times (the Pipeline seeds are random): same order
    assert sample_ids(first.run()[0]) == sample_ids(second.run()[0])


def test_pipeline_def_rejects_var_keyword():
    with pytest.raises(TypeError, match="kwargs"):

        @pipeline_def
        def bad(**kwargs):
            return None


def test_with_pipe_and_set_outputs_and_single_output(make_files):
    root, _ = make_files(4)
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        assert Pipeline.current() is pipe
        data, _ = fn.readers.file(file_root=root)
        pipe.set_outputs(data)
    assert Pipeline.current() is None
    (out,) = pipe.run()
    assert sample_ids(out) == [0, 1]


def test_define_graph_with_set_outputs_is_duplicate(make_files):
    root, _ = make_files(4)

    class P(Pipeline):
        def define_graph(self):
            return fn.readers.file(file_root=root)[0]

    pipe = P(batch_size=1, num_threads=1)
    with pytest.raises(PipelineError, match="Duplicate graph definition"):
        with pipe:
            pipe.set_outputs(fn.readers.file(file_root=root)[0])


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("run_async", [True, False])
def test_define_graph_subclass_with_iter_setup_feeding_inputs(depth, run_async):
    # The legacy pattern: iter_setup() feeds an ops.ExternalSource before each iteration and
    # raises StopIteration at the end of the data; reset() starts the next epoch.
    class FeedPipe(Pipeline):
        def __init__(self):
            super().__init__(
                batch_size=2,
                num_threads=1,
                prefetch_queue_depth=depth,
                exec_async=run_async,
                exec_pipelined=run_async,
            )
            self.source = ops.ExternalSource()
            self.position = 0

        def define_graph(self):
            self.data = self.source()
            return self.data

        def iter_setup(self):
            if self.position == 3:
                self.position = 0
                raise StopIteration
            self.feed_input(self.data, np.full((2, 1), self.position))
            self.position += 1

    pipe = FeedPipe()
    got = []
    for _ in range(2):
        while True:
            try:
                got.append(int(pipe.run()[0].at(0)[0]))
            except StopIteration:
                got.append("END")
                pipe.reset()
                break
    assert got == [0, 1, 2, "END", 0, 1, 2, "END"]
    pipe.close()


def test_operator_outside_pipeline_is_an_error(make_files):
    root, _ = make_files(2)
    with pytest.raises(PipelineError, match="outside a pipeline"):
        fn.readers.file(file_root=root)


def test_legacy_op_object_called_twice_makes_two_instances(make_files):
    root, _ = make_files(6)
    reader = ops.readers.File(file_root=root, num_shards=3, shard_id=0)
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        a, _ = reader()
        b, _ = reader()
        pipe.set_outputs(a, b)
    out_a, out_b = pipe.run()
    assert sample_ids(out_a) == sample_ids(out_b) == [0, 1]
    with pytest.raises(ArgumentError, match="unknown argument"):
        ops.readers.File(file_root=root, no_such_arg=1)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        # not given (-1, DALI's default): refused when the pipeline is built; a value out of
        # range is refused by the constructor (test_pipeline_args.py)
        (dict(num_threads=1), ArgumentError, "batch_size=-1"),
        (dict(batch_size=2), ArgumentError, "num_threads=-1"),
    ],
)
def test_build_checks_arguments(make_files, kwargs, error, message):
    root, _ = make_files(2)
    pipe = Pipeline(**kwargs)
    with pipe:
        pipe.set_outputs(fn.readers.file(file_root=root)[0])
    with pytest.raises(error, match=message):
        pipe.build()


def test_prefetch_queue_depth_forms():
    assert Pipeline(batch_size=1, num_threads=1, prefetch_queue_depth=3).cpu_queue_size == 3
    p = Pipeline(batch_size=1, num_threads=1, prefetch_queue_depth={"cpu_size": 4, "gpu_size": 2})
    assert (p.cpu_queue_size, p.gpu_queue_size, p.exec_separated) == (4, 2, True)
    with pytest.raises(ValueError, match="exec_async"):
        Pipeline(
            batch_size=1, prefetch_queue_depth={"cpu_size": 2, "gpu_size": 2}, exec_async=False
        )
    with pytest.raises(TypeError, match="prefetch_queue_depth"):
        Pipeline(batch_size=1, prefetch_queue_depth=2.5)


@pytest.mark.parametrize(
    "pipelined, run_async, depth",
    [
        (True, True, 1),
        (True, True, 3),
        (False, False, 2),
        (True, False, 2),
    ],
)
def test_same_stream_in_every_execution_mode(make_files, pipelined, run_async, depth):
    root, _ = make_files(12)
    pipe = Pipeline(
        batch_size=5,
        num_threads=2,
        seed=9,
        exec_pipelined=pipelined,
        exec_async=run_async,
        prefetch_queue_depth=depth,
    )
    with pipe:
        data, _ = fn.readers.file(file_root=root, random_shuffle=True, initial_fill=6)
        pipe.set_outputs(data)
    got = [sample_ids(pipe.run()[0]) for _ in range(5)]
    ref = Pipeline(batch_size=5, num_threads=1, seed=9, exec_async=False, exec_pipelined=False)
    with ref:
        data, _ = fn.readers.file(file_root=root, random_shuffle=True, initial_fill=6)
        ref.set_outputs(data)
    assert got == [sample_ids(ref.run()[0]) for _ in range(5)]


def test_schedule_run_share_release_and_api_mixing(make_files):
    root, _ = make_files(9)
    pipe = Pipeline(batch_size=3, num_threads=1, prefetch_queue_depth=2)
    with pipe:
        pipe.set_outputs(fn.readers.file(file_root=root)[0])
    pipe.schedule_run()  # queues the whole depth (2 iterations)
    assert not pipe.empty()
    assert sample_ids(pipe.share_outputs()[0]) == [0, 1, 2]
    pipe.release_outputs()
    assert sample_ids(pipe.outputs()[0]) == [3, 4, 5]
    assert pipe.empty()
    with pytest.raises(StopIteration):
        pipe.outputs()  # nothing scheduled is left
    with pytest.raises(PipelineError, match="Mixing pipeline API type"):
        pipe.run()


def test_seed_determinism_and_operator_seed_order(make_files):
    root, _ = make_files(20)

    def ids(seed):
        pipe = Pipeline(batch_size=20, num_threads=2, seed=seed)
        with pipe:
            a, _ = fn.readers.file(file_root=root, random_shuffle=True, initial_fill=20)
            pipe.set_outputs(a)
        return sample_ids(pipe.run()[0])

    assert ids(5) == ids(5)
    assert ids(5) != ids(6)


def test_reader_meta_and_epoch_size_of_all_readers(make_files):
    root, _ = make_files(10)
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        a, _ = fn.readers.file(
            file_root=root, name="A", num_shards=3, shard_id=2, pad_last_batch=True
        )
        b, _ = fn.readers.file(file_root=root, name="B")
        pipe.set_outputs(a, b)
    assert pipe.epoch_size() == {"A": 12, "B": 10}
    assert set(pipe.reader_meta()) == {"A", "B"}
    assert pipe.reader_meta("A")["number_of_shards"] == 3
    with pytest.raises(ArgumentError, match="no reader named 'C'"):
        pipe.epoch_size("C")


def test_reader_meta_lists_unnamed_readers_under_their_instance_name(make_files):
    # DALI keys every reader by its instance name, generated when name= is not given.
    root, _ = make_files(6)
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        a, _ = fn.readers.file(file_root=root, num_shards=4, pad_last_batch=True)
        pipe.set_outputs(a)
    sizes = pipe.epoch_size()
    assert list(sizes.values()) == [8]
    (name,) = sizes
    assert pipe.reader_meta(name)["number_of_shards"] == 4
    assert set(pipe.reader_meta()) == {name}


def test_unused_operators_are_pruned(make_files):
    root, _ = make_files(4)
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        a, _ = fn.readers.file(file_root=root, name="used")
        fn.readers.file(file_root=root, name="unused")
        pipe.set_outputs(a)
    assert set(pipe.reader_meta()) == {"used"}


def test_duplicate_operator_names(make_files):
    root, _ = make_files(2)
    pipe = Pipeline(batch_size=1, num_threads=1)
    with pytest.raises(ArgumentError, match="used twice"):
        with pipe:
            fn.readers.file(file_root=root, name="R")
            fn.readers.file(file_root=root, name="R")


def test_device_id_with_cpu_graph_needs_no_gpu(make_files):
    root, _ = make_files(2)
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=0)
    with pipe:
        pipe.set_outputs(fn.readers.file(file_root=root)[1])
    labels = pipe.run()[0]
    assert labels.as_array().shape == (2, 1)


def test_output_dtype_check(make_files):
    root, _ = make_files(2)
    pipe = Pipeline(batch_size=1, num_threads=1, output_dtype=np.float32)
    with pipe:
        pipe.set_outputs(fn.readers.file(file_root=root)[1])
    with pytest.raises(PipelineError, match="expected dtype"):
        pipe.run()


def test_negative_seed_warns():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        p = Pipeline(batch_size=1, num_threads=1, seed=-5)
    assert p.seed == 5 and any("negative" in str(x.message) for x in w)


def test_close_stops_threads(make_files):
    import threading

    root, _ = make_files(4)
    before = set(threading.enumerate())
    pipe = Pipeline(batch_size=2, num_threads=3)
    with pipe:  # cast is not a light operator: it runs on the worker threads
        pipe.set_outputs(fn.cast(fn.readers.file(file_root=root)[1], dtype=np.float32))
    pipe.run()
    started = [t for t in set(threading.enumerate()) - before if t.name.startswith("dlpipe")]
    assert len(started) >= 2  # the stage thread and the workers
    pipe.close()
    assert not any(t.is_alive() for t in started)


@pytest.mark.parametrize("run_async", [True, False])
def test_run_after_close_is_a_clear_error(run_async):
    pipe = Pipeline(batch_size=2, num_threads=2, exec_async=run_async, exec_pipelined=run_async)
    with pipe:
        pipe.set_outputs(fn.cast(fn.random.coin_flip(), dtype=np.float32))
    pipe.run()
    pipe.close()
    for _ in range(3):  # also past the batches that were prefetched
        with pytest.raises(PipelineError, match="closed"):
            pipe.run()
