"""The staged executor: worker errors reach the caller with their context, batch-level
operators split per-sample segments, and results do not depend on threads or depth."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import sample_ids
from dlpipe import Pipeline, PipelineError, fn
from dlpipe.graph import Operator, _call_operator, register


@register
class _FailOn(Operator):
    """Test operator: raises ZeroDivisionError on the sample whose id is ``bad``."""

    schema = "_test.fail_on"

    def setup(self, *, bad: int = -1) -> None:
        self.bad = bad

    def run_sample(self, inputs, args, param):
        sample_id = int(np.frombuffer(inputs[0].tobytes(), np.int32)[0])
        if sample_id == self.bad:
            return 1 // 0
        return inputs[0]


@register
class _BatchSum(Operator):
    """Test operator (batch level): every sample becomes the batch's sum of ids."""

    schema = "_test.batch_sum"
    batch_level = True

    def run_batch_cpu(self, inputs, args, params):
        ids = [int(np.frombuffer(x.tobytes(), np.int32)[0]) for x in inputs[0]]
        total = np.int32(sum(ids))
        return ([np.frombuffer(total.tobytes(), np.uint8).copy() for _ in ids],)


def build(root, batch_size, num_threads=2, exec_async=True, chain=("fail",), bad=-1):
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, exec_async=exec_async, seed=1)
    with pipe:
        data, _ = fn.readers.file(file_root=root)
        for step in chain:
            if step == "fail":
                (data,) = _call_operator("_test.fail_on", (data,), {"bad": bad})
            else:
                (data,) = _call_operator("_test.batch_sum", (data,), {})
        pipe.set_outputs(data)
    return pipe


@pytest.mark.parametrize("num_threads", [1, 4])
@pytest.mark.parametrize("exec_async", [True, False])
def test_unexpected_worker_error_is_reraised_with_context(make_files, num_threads, exec_async):
    root, names = make_files(8)
    pipe = build(root, 8, num_threads, exec_async, bad=5)
    with pytest.raises(PipelineError) as info:
        pipe.run()
    msg = str(info.value)
    assert "ZeroDivisionError" in msg and "_test.fail_on" in msg
    assert "sample 5" in msg and names[5] in msg
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    pipe.close()


def test_error_in_a_later_prefetched_iteration_surfaces_in_order(make_files):
    root, _ = make_files(8)
    pipe = build(root, 2, 2, True, bad=6)  # iteration 3 fails; 0-2 are fine
    pipe.build()
    for expected in ([0, 1], [2, 3], [4, 5]):
        assert sample_ids(pipe.run()[0]) == expected
    with pytest.raises(PipelineError, match="iteration 3"):
        pipe.run()


def test_batch_level_operator_splits_segments(make_files):
    root, _ = make_files(6)
    pipe = build(root, 3, 2, chain=("fail", "batch", "fail"))
    assert sample_ids(pipe.run()[0]) == [0 + 1 + 2] * 3
    assert sample_ids(pipe.run()[0]) == [3 + 4 + 5] * 3


def test_light_operators_run_on_the_stage_thread(make_files):
    import threading

    root, _ = make_files(8)
    pipe = Pipeline(batch_size=4, num_threads=4, seed=1)
    with pipe:
        data, _ = fn.readers.file(file_root=root, random_shuffle=True)
        pipe.set_outputs(data, fn.random.coin_flip())
    first = sample_ids(pipe.run()[0])
    workers = [
        t
        for t in threading.enumerate()
        if t.name.startswith("dlpipe-worker")
        and t.is_alive()
        and pipe._executor._pool is not None
        and t in getattr(pipe._executor._pool, "_threads", ())
    ]
    assert workers == []  # the pool was never used
    ref = Pipeline(batch_size=4, num_threads=1, seed=1)
    with ref:
        data, _ = fn.readers.file(file_root=root, random_shuffle=True)
        ref.set_outputs(data, fn.random.coin_flip())
    assert sample_ids(ref.run()[0]) == first


def test_equal_shape_outputs_arrive_as_one_array_ragged_ones_as_lists(image_root):
    pipe = Pipeline(batch_size=6, num_threads=3, seed=1)
    with pipe:
        jpegs, labels = fn.readers.file(file_root=image_root, random_shuffle=True)
        images = fn.decoders.image(jpegs)
        pipe.set_outputs(fn.resize(images, size=(20, 30)), images, labels)
    resized, decoded, labels = pipe.run()
    dense = resized.as_array()
    assert dense.shape == (6, 20, 30, 3) and resized.as_array() is dense
    assert np.asarray(resized.as_tensor()) is dense  # DALI's Tensor view of the same array
    assert all(np.shares_memory(resized.at(i), dense) for i in range(6))
    assert not decoded.is_dense_tensor()  # the source images differ in size
    assert labels.as_tensor().shape() == [6, 1]
    # the copies hold the right pixels: recompute sample 2 through its own pipeline
    ref = Pipeline(batch_size=6, num_threads=1, seed=1)
    with ref:
        jpegs, _ = fn.readers.file(file_root=image_root, random_shuffle=True)
        ref.set_outputs(fn.resize(fn.decoders.image(jpegs), size=(20, 30)))
    np.testing.assert_array_equal(ref.run()[0].at(2), dense[2])


def test_batch_level_operator_runs_ahead_of_a_run_it_does_not_read(make_files):
    """A batch-level operator that reads nothing of the per-sample run created before it runs
    ahead of that run (one run, not two cut by it), with the same results."""
    root, _ = make_files(6)
    pipe = Pipeline(batch_size=3, num_threads=2, seed=1)
    with pipe:
        data, _ = fn.readers.file(file_root=root)
        (a,) = _call_operator("_test.fail_on", (data,), {})
        (total,) = _call_operator("_test.batch_sum", (data,), {})
        (b,) = _call_operator("_test.fail_on", (a,), {})
        (c,) = _call_operator("_test.fail_on", (total,), {})
        (d,) = _call_operator("_test.batch_sum", (b,), {})  # reads the run: cuts it
        pipe.set_outputs(b, c, d)
    pipe.build()
    kinds = [(batch, [n.op.schema for n in nodes]) for batch, nodes in pipe._executor._segments]
    assert kinds == [
        (True, ["readers.file"]),
        (True, ["_test.batch_sum"]),
        (False, ["_test.fail_on", "_test.fail_on", "_test.fail_on"]),
        (True, ["_test.batch_sum"]),
    ]
    for first in (0, 3):
        b, c, d = pipe.run()
        assert sample_ids(b) == [first, first + 1, first + 2]
        assert sample_ids(c) == [3 * first + 3] * 3
        assert sample_ids(d) == [3 * first + 3] * 3
