"""The executor's lanes, with a stand-in GPU stage (no GPU needed): the CPU stage runs ahead by
the lookahead, at most ``lanes + DECODED_SPARE`` iterations are decoded ahead of the GPU stage,
at most ``depth`` finished batches wait for the consumer, batches come out in order, and
close() does not hang on lanes waiting for room."""

from __future__ import annotations

import threading
import time

from dlpipe.executor import DECODED_SPARE, Executor


class StandInGpuStage:
    """``run_mixed`` takes ``decode_s`` (a lane's decode); ``__call__`` gives the iteration."""

    lanes = 3

    def __init__(self, decode_s: float = 0.01):
        self.decode_s = decode_s
        self.lock = threading.Lock()
        self.started = 0
        self.finished = 0
        self.most_ahead = 0  # lanes started but not through the GPU stage, at most
        self.profiler = None

    def run_mixed(self, ws):
        with self.lock:
            self.started += 1
            self.most_ahead = max(self.most_ahead, self.started - self.finished)
        time.sleep(self.decode_s)
        return ws

    def __call__(self, ws):
        with self.lock:
            self.finished += 1
        return (ws.iteration,)


def executor(stage, depth=2, lookahead=6):
    return Executor([], [], {}, 4, 1, depth, True, stage, None, [], lookahead)


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.005)
    return cond()


def test_batches_in_order_with_lanes_bounded():
    stage = StandInGpuStage()
    ex = executor(stage)
    ex.schedule()
    got = []
    for _ in range(40):
        got.append(ex.get()[0])
        ex.schedule()
    ex.close()
    assert got == list(range(40))
    assert stage.most_ahead <= StandInGpuStage.lanes + DECODED_SPARE


def test_cpu_stage_runs_ahead_but_outputs_wait_within_the_depth():
    stage = StandInGpuStage(decode_s=0.001)
    ex = executor(stage, depth=2, lookahead=10)
    ex.schedule()  # depth + lookahead tickets
    assert ex.get()[0] == 0
    # the consumer pauses: the CPU stage makes every ticketed iteration (12), the GPU stage
    # fills the queue to the depth and no further, the lanes decode only 3 + 2 ahead of it
    assert wait_for(lambda: ex._iteration == 12 and ex._done.qsize() == 2)
    time.sleep(0.2)  # time to run further, if it could
    assert ex._iteration == 12
    assert ex._done.qsize() == 2
    assert stage.finished == 3  # the batch taken and the two waiting
    assert stage.started == 3 + StandInGpuStage.lanes + DECODED_SPARE
    ex.schedule()
    assert [ex.get()[0] for _ in range(2)] == [1, 2]
    ex.close()


def test_close_does_not_hang_on_lanes_waiting_for_room():
    stage = StandInGpuStage(decode_s=0.001)
    ex = executor(stage)
    ex.schedule()
    ahead = StandInGpuStage.lanes + DECODED_SPARE
    assert wait_for(lambda: ex._done.qsize() == 2 and stage.started == 2 + ahead)
    start = time.monotonic()
    ex.close()
    assert time.monotonic() - start < 5
    assert not any(t.is_alive() for t in ex._threads)
    assert ex._done.qsize() == 0  # the batches nobody will take are let go


def test_an_abandoned_pipeline_does_not_hold_up_exit():
    # Lanes are non-daemon threads, joined when the interpreter exits: none may be left
    # waiting for room that only a consumer would make.
    import os
    import subprocess
    import sys

    script = (
        "import sys, time; sys.path.insert(0, sys.argv[1])\n"
        "from test_executor_lanes import StandInGpuStage, executor, wait_for\n"
        "stage = StandInGpuStage(decode_s=0.001)\n"
        "ex = executor(stage)\n"
        "ex.schedule()\n"
        "ex.get()\n"
        "assert wait_for(lambda: ex._done.qsize() == 2)\n"
        "time.sleep(0.1)\n"
        "print('exiting', flush=True)\n"
    )
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, "-c", script, here], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "exiting" in out.stdout


class _TakesBatches:
    """A GPU-stage operator that wants its CPU inputs as one array (like the .gpu() copy)."""

    dense_inputs = True

    def batch_params(self, n):
        return None


def test_cpu_inputs_of_a_batch_taking_operator_arrive_as_one_array(image_root):
    """The reader's labels (a batch-level output) and a per-sample operator's output reach a
    ``dense_inputs`` operator as ``Rows``: the samples, and ``.array``, their one batch."""
    from dlpipe import Pipeline, fn
    from dlpipe.graph import OpNode, Rows

    pipe = Pipeline(batch_size=4, num_threads=2, device_id=None, seed=3)
    with pipe:
        jpegs, labels = fn.readers.file(file_root=image_root, name="Reader")
        images = fn.resize(fn.decoders.image(jpegs), size=(8, 6))
        pipe.set_outputs(images)
    cpu_ops = list(pipe._ops)
    consumer = OpNode(_TakesBatches(), [labels, images], {}, "consumer")
    seen = []

    class Stage:
        lanes = 0
        profiler = None

        def __call__(self, ws):
            seen.append([ws.values[x] for x in consumer.inputs])
            return ()

    ex = Executor(cpu_ops, [], {}, 4, 2, 1, False, Stage(), None, [consumer], 0)
    ex.schedule()
    ex.get()
    got_labels, got_images = seen[0]
    assert isinstance(got_labels, Rows) and got_labels.array.shape == (4, 1)
    assert isinstance(got_images, Rows) and got_images.array.shape == (4, 8, 6, 3)
    for i in range(4):
        assert got_images[i].base is got_images.array or got_images[i] is got_images.array[i]
        assert (got_images.array[i] == got_images[i]).all()
    ex.close()
