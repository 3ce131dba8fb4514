"""Per-sample CPU operators in sample processes (``_sample_processes.py``): the same batches
as with threads, the chain cut where it may be, failures and skips as the threads report
them, and a fallback to threads where no process starts."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from audio_data import speech_like, to_pcm, write_wav
from sample_ops import EnvValue
from sample_ops import Half as _Half

from dlpipe import Pipeline, fn, types
from dlpipe._ipc import process as ipc_process
from dlpipe._sample_processes import RemoteRun, plan
from dlpipe.errors import PipelineError
from dlpipe.options import RuntimeOptions

pytestmark = pytest.mark.skipif(not ipc_process.supported(), reason="helpers need Linux memfd")


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """Twelve WAVs of 0.3-1.5 s (16 and 22.05 kHz), silence at both ends, and a file list."""
    root = str(tmp_path_factory.mktemp("speech"))
    lines = []
    for k in range(12):
        rate = 16000 if k % 3 else 22050
        n = int(rate * (0.3 + 0.1 * k))
        x = speech_like(n, rate, seed=k, silence=rate // 10)
        name = f"u{k:02d}.wav"
        write_wav(os.path.join(root, name), to_pcm(x, 16), rate)
        lines.append(f"{name} {k}")
    with open(os.path.join(root, "list.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return root


def new_pipe(processes: bool, batch_size: int, seed: int, threads: int = 2) -> Pipeline:
    """A CPU pipeline with sample processes on or off."""
    return Pipeline(
        batch_size=batch_size,
        num_threads=threads,
        device_id=None,
        seed=seed,
        runtime=RuntimeOptions(sample_processes=processes),
    )


def jasper_like(root: str, processes: bool, train: bool = True, threads: int = 3, **kw):
    """DLE Jasper's CPU part: read, speed perturbation by resampling, trimming, slicing."""
    pipe = new_pipe(processes, 5, 7, threads=threads)
    with pipe:
        encoded, label = fn.readers.file(
            file_root=root,
            file_list=os.path.join(root, "list.txt"),
            shuffle_after_epoch=True,
            name="Reader",
        )
        rate = fn.random.uniform(range=[0.85, 1.15]) * 16000 if train else 16000
        audio, sr = fn.decoders.audio(encoded, sample_rate=rate, dtype=types.FLOAT, downmix=True)
        begin, length = fn.nonsilent_region(audio, cutoff_db=-60, **kw)
        audio = fn.slice(audio, begin, length, axes=[0])
        pipe.set_outputs(audio, label, sr, begin)
    pipe.build()
    return pipe


def assert_same_batches(want: list, got: list) -> None:
    """Every output sample of every batch equal, dtype and shape too."""
    for b_want, b_got in zip(want, got, strict=True):
        for out_want, out_got in zip(b_want, b_got, strict=True):
            for x, y in zip(out_want, out_got, strict=True):
                assert x.dtype == y.dtype and x.shape == y.shape
                np.testing.assert_array_equal(x, y)


def batches(pipe, n: int) -> list:
    out = []
    for _ in range(n):
        out.append([[np.array(t) for t in x] for x in pipe.run()])
    pipe.close()
    return out


@pytest.mark.parametrize("train", [True, False])
def test_same_batches_as_threads(speech, train):
    """Processes give every batch bit for bit as threads do (three iterations: 15 of the 12
    files, so the second epoch's shuffle is in it too)."""
    want = batches(jasper_like(speech, False, train), 3)
    pipe = jasper_like(speech, True, train)
    assert pipe._executor._sample_processes is not None  # the chain went to the processes
    got = batches(pipe, 3)
    for b_want, b_got in zip(want, got, strict=True):
        for out_want, out_got in zip(b_want, b_got, strict=True):
            for x, y in zip(out_want, out_got, strict=True):
                assert x.dtype == y.dtype and x.shape == y.shape
                np.testing.assert_array_equal(x, y)


def test_plan_keeps_readers_and_random_numbers_local(speech):
    pipe = jasper_like(speech, True)
    pipe.build()
    (parts,) = pipe._executor._remote.values()
    (run,) = [p for p in parts if isinstance(p, RemoteRun)]
    assert [n.op.schema for n in run.nodes] == ["decoders.audio", "nonsilent_region", "slice"]
    local = [n for p in parts if not isinstance(p, RemoteRun) for n in p]
    assert all(n.op.schema in ("readers.file", "random.uniform") for n in local)
    # sent back: the sliced audio, the rate and begin (outputs); not the untrimmed audio
    assert len(run.gives) == 3
    pipe.close()


def test_no_process_for_light_chains(tmp_path):
    """A run without a GIL-holding operator stays in threads (slice alone is a copy)."""
    pipe = Pipeline(batch_size=2, num_threads=2, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: [np.arange(10, dtype=np.float32)] * 2, batch=True)
        pipe.set_outputs(fn.slice(x, 2, 5, axes=[0]))
    pipe.build()
    assert pipe._executor._sample_processes is None
    np.testing.assert_array_equal(np.array(pipe.run()[0])[0], np.arange(2, 7))
    pipe.close()


class _Op:
    def __init__(self, safe, gil=False):
        self.process_safe, self.holds_gil, self.light, self.device = safe, gil, False, "cpu"


class _Node:
    def __init__(self, name, op, inputs, outputs):
        self.name, self.op, self.inputs, self.outputs = name, op, inputs, outputs
        self.arg_nodes, self.scope = {}, None

    def __repr__(self):
        return self.name


def test_plan_cuts_in_three():
    """Before: what takes nothing of the part; the part: every process-safe operator that does
    not wait for one that stays; after: the rest."""
    a, b, c, d, e, f = (object() for _ in range(6))
    read = _Node("read", _Op(False), [], [a])
    decode = _Node("decode", _Op(True, True), [a], [b])
    noise = _Node("noise", _Op(False), [b], [c])  # random.normal(audio): stays, after
    trim = _Node("trim", _Op(True), [b], [d])  # safe, takes only the part's value
    mix = _Node("mix", _Op(True), [d, c], [e])  # safe but waits for noise: after
    coin = _Node("coin", _Op(False), [], [f])  # takes nothing: before
    before, run, after = plan([read, decode, noise, trim, mix, coin], lambda dn, inside: True)
    assert (before, run.nodes, after) == ([read, coin], [decode, trim], [noise, mix])
    assert [dn for _, dn in run.takes] == [a]
    assert run.gives == [b, d]


def test_plan_needs_an_operator_that_holds_the_gil():
    a, b = object(), object()
    nodes = [_Node("slice", _Op(True), [a], [b])]
    assert plan(nodes, lambda dn, inside: True) == (nodes, None, [])


def test_failure_names_operator_sample_and_file(speech, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for k in range(3):
        rate = 16000
        write_wav(str(bad / f"ok{k}.wav"), to_pcm(speech_like(4000, rate, seed=k), 16), rate)
    (bad / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk")
    (bad / "list.txt").write_text("ok0.wav 0\nok1.wav 1\nbroken.wav 2\nok2.wav 3\n")
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=None, seed=1)
    with pipe:
        enc, _ = fn.readers.file(file_root=str(bad), file_list=str(bad / "list.txt"))
        audio, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True)
        pipe.set_outputs(audio)
    with pytest.raises(Exception) as info:
        pipe.run()
    message = str(info.value)
    assert "decoders.audio" in message and "sample 2" in message and "broken.wav" in message
    assert any("sample process" in note for note in getattr(info.value, "__notes__", []))
    pipe.close()


def test_falls_back_to_threads_with_one_warning(speech, monkeypatch):
    def refuse():
        raise ipc_process.HelperStartError("no interpreter here (test)")

    want = batches(jasper_like(speech, False), 2)
    monkeypatch.setattr(ipc_process, "python", refuse)
    pipe = jasper_like(speech, True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = batches(pipe, 2)
    starts = [w for w in caught if "no sample process could start" in str(w.message)]
    assert len(starts) == 1 and "no interpreter here" in str(starts[0].message)
    for b_want, b_got in zip(want, got, strict=True):
        for x, y in zip(b_want[0], b_got[0], strict=True):
            np.testing.assert_array_equal(x, y)


def test_option_off_uses_threads(speech):
    pipe = jasper_like(speech, False)
    pipe.build()
    assert pipe._executor._sample_processes is None
    pipe.close()
    with pytest.raises(ValueError):
        RuntimeOptions.from_env({"DLPIPE_LANES": "x"})
    assert not RuntimeOptions.from_env({"DLPIPE_SAMPLE_PROCESSES": "0"}).sample_processes
    assert PipelineError  # the errors module is what the executor raises through


def test_feature_chain_on_the_cpu(speech):
    """DLE Jasper with ``--dali_device cpu``: the dither (a random number of the trimmed audio)
    stays in the pipeline's process between two parts; the features are the threads'."""

    def build(processes: bool):
        pipe = new_pipe(processes, 4, 3)
        with pipe:
            enc, label = fn.readers.file(
                file_root=speech, file_list=os.path.join(speech, "list.txt")
            )
            audio, _ = fn.decoders.audio(enc, dtype=types.FLOAT, downmix=True, sample_rate=16000)
            begin, length = fn.nonsilent_region(audio, cutoff_db=-60)
            audio = fn.slice(audio, begin, length, axes=[0])
            audio = audio + fn.random.normal(audio) * 1e-5
            audio = fn.preemphasis_filter(audio)
            spec = fn.spectrogram(audio, nfft=512, window_length=320, window_step=160)
            mel = fn.mel_filter_bank(spec, sample_rate=16000, nfilter=64, normalize=True)
            db = fn.to_decibels(mel, multiplier=np.log(10), reference=1.0, cutoff_db=-46)
            pipe.set_outputs(fn.normalize(db, axes=[1]), fn.mfcc(db), label)
        pipe.build()
        return pipe

    pipe = build(True)
    (run_phases,) = pipe._executor._remote.values()
    schemas = [p.nodes if isinstance(p, RemoteRun) else p for p in run_phases]
    schemas = [[n.op.schema for n in p] for p in schemas]
    assert schemas == [
        ["decoders.audio", "nonsilent_region", "slice"],  # (the reader is batch-level here)
        ["random.normal", "_arithmetic_generic_op"],
        ["preemphasis_filter", "spectrogram", "mel_filter_bank", "to_decibels", "mfcc"],
        ["normalize"],
    ]
    assert [isinstance(p, RemoteRun) for p in run_phases] == [True, False, True, False]
    assert_same_batches(batches(build(False), 3), batches(pipe, 3))


def test_reply_buffers_travel_in_shared_memory():
    """pack() puts the reply's arrays in the memfd (the pipe carries only the rest), unpack()
    gives writable copies; a reply too large for the memory travels whole."""
    import mmap

    from dlpipe._sample_server import Packed, SamplesDone, pack, unpack

    rng = np.random.default_rng(0)
    arrays = [rng.random(n, dtype=np.float32) for n in (1000, 17, 4096)]
    reply = SamplesDone([(i, [a]) for i, a in enumerate(arrays)], [], None, [0.0], [3])
    memory = mmap.mmap(-1, 1 << 16)
    packed = pack(reply, memory)
    assert isinstance(packed, Packed) and len(packed.data) < 2000
    back = unpack(packed, memory)
    memory[:] = bytes(len(memory))  # the next request overwrites the memory: copies stay
    for (_, (got,)), want in zip(back.results, arrays, strict=True):
        np.testing.assert_array_equal(got, want)
        got[0] = 1  # writable
    assert pack(reply, mmap.mmap(-1, 4096)) is reply  # too large: on the pipe


def test_batches_larger_than_the_shared_memory(speech, monkeypatch):
    import dlpipe._sample_processes as sp

    want = batches(jasper_like(speech, False), 2)
    monkeypatch.setattr(sp, "SHARED_BYTES", 4096)
    got = batches(jasper_like(speech, True), 2)
    for b_want, b_got in zip(want, got, strict=True):
        for x, y in zip(b_want[0], b_got[0], strict=True):
            np.testing.assert_array_equal(x, y)


class _Unpicklable(Exception):
    def __init__(self, a, b):  # pickling calls __init__ with one argument: fails
        super().__init__(f"{a}{b}")


class _Raises:
    def run_sample(self, inputs, args, param):
        raise _Unpicklable("no", "pickle")


def test_server_runs_skips_and_fails_like_the_threads():
    from dlpipe._sample_server import Server, Step

    steps = [Step(_Half(), (0,), (), (1,)), Step(_Half(), (1,), (), (2,))]
    items = [(0, {0: 8.0}, [None, 1]), (1, {0: -1.0}, [None, None]), (2, {0: 4.0}, [0, 0])]
    done = Server.run(steps, items, (2,))
    assert done.results == [(0, [3.0]), (2, [1.0])]  # (8/2)/2 + 1, (4/2)/2
    assert done.skipped == [(1, 0, "a bad one")] and done.failed is None
    assert done.counts == [2, 2]
    done = Server.run(steps, [(5, {0: 2.0}, [None, None]), (6, {0: -2.0}, [None, None])], (2,))
    index, step, exc, kind, message, where = done.failed
    assert (index, step, kind, message) == (6, 0, "ValueError", "worse")
    assert isinstance(exc, ValueError) and "run_sample" in where
    done = Server.run([Step(_Raises(), (0,), (), (1,))], [(0, {0: 1}, [None])], (1,))
    assert done.failed[2] is None and done.failed[3:5] == ("_Unpicklable", "nopickle")


def test_box_encoder_in_processes():
    """SSD's CPU box_encoder (numpy on 8732 anchors a sample) goes to the processes; the
    encoded boxes and labels are the threads'."""
    rng = np.random.default_rng(0)
    anchors = rng.random((8732, 4)).astype(np.float32)
    anchors[:, 2:] = anchors[:, :2] + 0.1

    def build(processes: bool):
        draw = np.random.default_rng(5)

        def source():
            boxes = [
                np.sort(draw.random((draw.integers(0, 6), 2, 2), np.float32), axis=1).reshape(-1, 4)
                for _ in range(8)
            ]
            return boxes, [draw.integers(1, 80, len(b)).astype(np.int32) for b in boxes]

        pipe = new_pipe(processes, 8, 0)
        with pipe:
            b, lab = fn.external_source(source=source, num_outputs=2, batch=True)
            enc, enc_labels = fn.box_encoder(
                b, lab, anchors=anchors.ravel().tolist(), offset=True, stds=[0.1, 0.1, 0.2, 0.2]
            )
            pipe.set_outputs(enc, enc_labels)
        pipe.build()
        return pipe

    pipe = build(True)
    (parts,) = pipe._executor._remote.values()
    assert [[n.op.schema for n in p.nodes] for p in parts if isinstance(p, RemoteRun)] == [
        ["box_encoder"]
    ]
    assert_same_batches(batches(build(False), 3), batches(pipe, 3))


def test_image_chain_joins_a_part_with_box_encoder(tmp_path):
    """In SSD's graphs the image chain (decode, slice, resize, flip) shares its run with the
    box encoding, which holds the GIL: all of it goes to the processes, and gives the threads'
    images and boxes."""
    from dlpipe.synthetic import make_dataset

    root = str(tmp_path / "jpegs")
    make_dataset(root, num_classes=2, per_class=6, size_range=(64, 120), seed=3)
    anchors = np.random.default_rng(1).random((300, 4)).astype(np.float32)
    anchors[:, 2:] = anchors[:, :2] + 0.2

    def build(processes: bool):
        pipe = new_pipe(processes, 6, 9)
        with pipe:
            jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
            images = fn.decoders.image(jpegs, output_type=types.RGB)
            images = fn.slice(images, rel_start=[0.1, 0.1], rel_end=[0.9, 0.8])
            images = fn.resize(images, resize_x=64, resize_y=48)
            images = fn.flip(images, horizontal=fn.random.coin_flip())
            boxes = fn.random.uniform(range=[0.0, 0.5], shape=[2, 4])
            classes = fn.cast(fn.random.uniform(range=[1, 5], shape=[2]), dtype=types.INT32)
            enc, enc_labels = fn.box_encoder(boxes, classes, anchors=anchors.ravel().tolist())
            pipe.set_outputs(images, enc, enc_labels, labels)
        pipe.build()
        return pipe

    pipe = build(True)
    parts = [p for v in pipe._executor._remote.values() for p in v if isinstance(p, RemoteRun)]
    schemas = {n.op.schema for p in parts for n in p.nodes}
    assert {"decoders.image", "slice", "resize", "flip", "box_encoder"} <= schemas
    assert_same_batches(batches(build(False), 3), batches(pipe, 3))


def test_requests_in_flight_keep_their_replies_apart():
    """A process holds up to IN_FLIGHT requests, each reply in its own part of the memfd: a
    third request sent before any reply was read waits for (and copies out) the first, and
    replies taken in any order are each their own request's."""
    import pickle

    import dlpipe._sample_processes as sp
    from dlpipe._sample_server import Packed, Samples, Step

    run = RemoteRun(999, [], pickle.dumps([Step(_Half(), (0,), (), (1,))]), [], [], (1,))
    procs = sp.SampleProcesses(1)
    sent = []
    try:
        procs.submit(run, [(0, {0: np.zeros(4)}, [None])]).result()  # started, chain known
        (line,) = procs._lines
        submit = line.helper.submit
        line.helper.submit = lambda msg: (sent.append(msg), submit(msg))
        pending = []
        for k in range(3):
            items = [(i, {0: np.full(50_000, 8.0 * k + i)}, [None]) for i in range(2)]
            pending.append(procs.submit(run, items))
            assert len(line.tickets) <= sp.IN_FLIGHT
        assert line.sent == 4
        # the samples' arrays went through the memfd: the pipe carried a small message
        assert all(len(pickle.dumps(m)) < 2000 for m in sent)
        assert all(isinstance(Samples.from_wire(m).items, Packed) for m in sent)
        for k in (2, 0, 1):
            (done,) = pending[k].result()
            assert done.failed is None and [i for i, _ in done.results] == [0, 1]
            for i, (value,) in done.results:
                np.testing.assert_array_equal(value, np.full(50_000, (8.0 * k + i) / 2))
    finally:
        procs.stop()


def test_cpu_stage_runs_in_two_threads_with_processes(speech):
    """With sample processes and a prefetching pipeline, the CPU stage has a front (sends an
    iteration's samples, goes on to the next) and a back (collects them); the batches over two
    epochs are the threads' (test_same_batches_as_threads compares the rest)."""
    pipe = jasper_like(speech, True)
    assert pipe._executor._back
    names = {t.name for t in pipe._executor._threads}
    assert {"dlpipe-cpu-stage", "dlpipe-cpu-back"} <= names
    assert_same_batches(batches(jasper_like(speech, False), 6), batches(pipe, 6))


def test_one_blas_thread_a_process_unless_the_user_set_it(monkeypatch):
    """A process per core, each with one BLAS thread (numpy's OpenBLAS would start its own
    threads for large products); a value the user set is kept."""
    import pickle

    import dlpipe._sample_processes as sp
    from dlpipe._sample_server import Step

    run = RemoteRun(998, [], pickle.dumps([Step(EnvValue(), (0,), (), (1,))]), [], [], (1,))
    names = ["OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"]
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    procs = sp.SampleProcesses(1)
    try:
        (done,) = procs.run(run, [(i, {0: name}, [None]) for i, name in enumerate(names)])
        got = {names[i]: bytes(v).decode() for i, (v,) in done.results}
    finally:
        procs.stop()
    assert got == {"OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "3"}
