"""``fn.external_source``: callables, iterables, per-sample mode, epochs, feed_input, errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, PipelineError, fn, types

MODES = [dict(exec_async=True, exec_pipelined=True), dict(exec_async=False, exec_pipelined=False)]


def make(source_args, batch_size=4, depth=2, **pipe_args):
    pipe = Pipeline(
        batch_size=batch_size, num_threads=2, prefetch_queue_depth=depth, seed=0, **pipe_args
    )
    with pipe:
        out = fn.external_source(**source_args)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe


def epoch(pipe, col=0):
    """Run until StopIteration; the first element of every sample, per batch."""
    batches = []
    while True:
        try:
            outs = pipe.run()
        except StopIteration:
            return batches
        batches.append([int(np.asarray(outs[col].at(i)).ravel()[0]) for i in range(len(outs[col]))])


def gen3():
    for i in range(3):
        yield [np.array([10 * i + k], np.int32) for k in range(4)]


@pytest.mark.parametrize("mode", MODES)
def test_generator_function_with_cycle_raise_restarts_after_reset(mode):
    pipe = make(dict(source=gen3, cycle="raise"), **mode)
    want = [[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23]]
    assert epoch(pipe) == want
    pipe.reset()
    assert epoch(pipe) == want


@pytest.mark.parametrize("mode", MODES)
def test_no_cycle_is_one_pass(mode):
    pipe = make(dict(source=gen3), **mode)
    assert len(epoch(pipe)) == 3
    pipe.reset()
    assert epoch(pipe) == []


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("mode", MODES)
def test_runs_past_the_end_keep_raising_stop_iteration_until_reset(mode, depth):
    # DALI: after the end of the data nothing is scheduled; run() raises StopIteration again
    # (it used to hang with the async executor) and reset() starts the next epoch in order.
    pipe = make(dict(source=gen3, cycle="raise"), depth=depth, **mode)
    want = [[0, 1, 2, 3], [10, 11, 12, 13], [20, 21, 22, 23]]
    assert epoch(pipe) == want
    for _ in range(3):
        with pytest.raises(StopIteration):
            pipe.run()
        assert pipe.empty()
    pipe.reset()
    assert epoch(pipe) == want
    pipe.reset()
    assert epoch(pipe) == want
    pipe.close()


def test_cycle_quiet_repeats_forever():
    pipe = make(
        dict(source=[np.arange(2 * i, 2 * i + 2)[:, None] for i in range(2)], cycle="quiet"),
        batch_size=2,
    )
    got = [pipe.run()[0].as_array().ravel().tolist() for _ in range(5)]
    assert got == [[0, 1], [2, 3], [0, 1], [2, 3], [0, 1]]


@pytest.mark.parametrize("mode", MODES)
def test_batch_callable_gets_batch_info_and_ends_the_epoch(mode):
    calls = []

    def source(info):
        calls.append((info.iteration, info.epoch_idx))
        if info.iteration == 2:
            raise StopIteration
        return np.full((3, 1), 100 * info.epoch_idx + info.iteration, np.int64)

    pipe = make(dict(source=source, batch_info=True), batch_size=3, **mode)
    assert epoch(pipe) == [[0, 0, 0], [1, 1, 1]]
    pipe.reset()
    assert epoch(pipe) == [[100, 100, 100], [101, 101, 101]]
    assert (0, 0) in calls and (2, 1) in calls


def test_per_sample_callable_sample_info_and_variable_last_batch():
    def source(info: types.SampleInfo):
        if info.idx_in_epoch >= 10:
            raise StopIteration
        return np.array([info.idx_in_epoch, info.idx_in_batch, info.iteration], np.int32)

    pipe = make(dict(source=source, batch=False), batch_size=4, depth=1)
    first = pipe.run()[0].as_array()
    assert first.tolist() == [[0, 0, 0], [1, 1, 0], [2, 2, 0], [3, 3, 0]]
    assert pipe.run()[0].as_array()[:, 0].tolist() == [4, 5, 6, 7]
    with pytest.raises(StopIteration):  # samples 8, 9 then StopIteration: batch dropped
        pipe.run()


def test_per_sample_iterable_gives_a_partial_last_batch():
    pipe = make(dict(source=[np.int32(i) for i in range(6)], batch=False), batch_size=4)
    assert pipe.run()[0].as_array().tolist() == [0, 1, 2, 3]
    last = pipe.run()[0]
    assert len(last) == 2 and last.as_array().tolist() == [4, 5]


def _square(info):
    return np.array([info.idx_in_epoch**2], np.int64)


def test_parallel_per_sample_callable_in_worker_processes():
    pipe = Pipeline(batch_size=4, num_threads=1, py_num_workers=2, py_start_method="fork")
    with pipe:
        pipe.set_outputs(fn.external_source(_square, batch=False, parallel=True))
    assert pipe.run()[0].as_array().ravel().tolist() == [0, 1, 4, 9]
    assert pipe.run()[0].as_array().ravel().tolist() == [16, 25, 36, 49]
    pipe.close()


def _five_then_stop(info):
    if info.idx_in_epoch >= 5:
        raise StopIteration
    return np.array([info.idx_in_epoch, info.epoch_idx], np.int32)


def test_parallel_per_sample_callable_stop_iteration_ends_the_epoch():
    # As without parallel=True: samples 4 and 5 -> StopIteration, the partial batch dropped.
    pipe = Pipeline(batch_size=2, num_threads=1, py_num_workers=2, prefetch_queue_depth=1)
    with pipe:
        pipe.set_outputs(fn.external_source(_five_then_stop, batch=False, parallel=True))
    for _ in range(2):
        assert epoch(pipe) == [[0, 1], [2, 3]]
        pipe.reset()
    assert pipe.run()[0].as_array()[:, 1].tolist() == [2, 2]
    pipe.close()


def test_num_outputs_and_layout():
    def source():
        return np.zeros((2, 3, 3), np.uint8), [np.int32(1), np.int32(2)]

    pipe = make(dict(source=source, num_outputs=2, layout="HW"), batch_size=2)
    images, labels = pipe.run()
    assert images.layout() == "HW" and images.shape() == [(3, 3), (3, 3)]
    assert labels.as_array().tolist() == [1, 2]


def test_feed_input_and_run_inputs():
    pipe = Pipeline(batch_size=3, num_threads=1, prefetch_queue_depth=2)
    with pipe:
        pipe.set_outputs(fn.external_source(name="x"))
    pipe.feed_input("x", np.arange(3))
    pipe.feed_input("x", [np.int64(7), np.int64(8)])
    assert pipe.run()[0].as_array().tolist() == [0, 1, 2]
    assert pipe.run()[0].as_array().tolist() == [7, 8]  # variable batch size
    with pytest.raises(PipelineError, match="prefetch_queue_depth=1"):
        pipe.run(x=np.arange(3))

    pipe1 = Pipeline(batch_size=3, num_threads=1, prefetch_queue_depth=1)
    with pipe1:
        pipe1.set_outputs(fn.external_source(name="x"))
    assert pipe1.run(x=np.ones((3, 2)))[0].shape() == [(2,)] * 3
    with pytest.raises(PipelineError, match="no data"):
        pipe1.run()


def test_feed_input_takes_tensor_lists_and_their_layout():
    # Another pipeline's output (ragged, with a layout) or a list of its samples.
    from dlpipe.tensors import TensorListCPU

    ragged = TensorListCPU([np.arange(3, dtype=np.uint8), np.arange(5, dtype=np.uint8)], "W")
    dense = TensorListCPU(np.zeros((2, 4, 4), np.float32), "HW")
    pipe = Pipeline(batch_size=3, num_threads=1, prefetch_queue_depth=1)
    with pipe:
        pipe.set_outputs(fn.external_source(name="x"))
    pipe.feed_input("x", ragged)
    out = pipe.run()[0]
    assert out.shape() == [(3,), (5,)] and out.layout() == "W"
    assert out.at(1).tolist() == [0, 1, 2, 3, 4]
    pipe.feed_input("x", list(ragged))
    assert pipe.run()[0].shape() == [(3,), (5,)]
    pipe.feed_input("x", dense)
    out = pipe.run()[0]
    assert out.shape() == [(4, 4)] * 2 and out.layout() == "HW"


def test_errors():
    with pytest.raises(ArgumentError, match="cycle"):
        make(dict(source=lambda: np.zeros((1, 1)), cycle="quiet"))
    with pytest.raises(ArgumentError, match="generator object"):
        make(dict(source=gen3(), cycle="raise"))
    with pytest.raises(ArgumentError, match="parallel=True"):
        make(dict(source=lambda: np.zeros((1, 1)), parallel=True))
    pipe = make(dict(source=lambda: np.zeros((2, 1), np.float64), dtype=types.FLOAT))
    with pytest.raises(PipelineError, match="expected dtype float32"):
        pipe.run()
    pipe = make(dict(source=lambda: np.zeros((9, 1))), batch_size=4)
    with pytest.raises(PipelineError, match="exceeds max_batch_size=4"):
        pipe.run()
    src = make(dict(source=gen3, name="s"))
    with pytest.raises(PipelineError, match="feed_input is not allowed"):
        src.feed_input("s", np.zeros((1, 1)))


@pytest.mark.parametrize("mode", MODES)
def test_callback_exception_reaches_caller_with_its_type(mode):
    def source(info):
        if info.iteration == 1:
            raise KeyError("missing sample 17")
        return np.zeros((2, 1))

    pipe = make(dict(source=source, batch_info=True), batch_size=2, **mode)
    pipe.run()
    with pytest.raises(KeyError, match="missing sample 17") as info:
        pipe.run()
    assert any("external_source" in n for n in getattr(info.value, "__notes__", []))
    pipe.close()


def _big_sample(info):
    return np.full((256, 256, 3), info.idx_in_epoch, np.uint8)  # 192 KB: via shared memory


def test_parallel_large_samples_travel_through_shared_memory():
    import glob

    before = set(glob.glob("/dev/shm/*"))
    pipe = Pipeline(batch_size=3, num_threads=1, py_num_workers=2, py_start_method="fork")
    with pipe:
        pipe.set_outputs(fn.external_source(_big_sample, batch=False, parallel=True))
    out = pipe.run()[0].as_array()
    assert out.shape == (3, 256, 256, 3) and [int(out[i].mean()) for i in range(3)] == [0, 1, 2]
    pipe.close()
    assert set(glob.glob("/dev/shm/*")) - before == set()  # every block was unlinked
