"""readers.file's read process: a batch's files read by a helper process into shared memory.
The same bytes as a read in this process, slots never overwritten while a batch is held, errors
that name the file, and no process left behind."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from conftest import file_reader_pipe
from dlpipe import DataNotFoundError, PipelineError
from dlpipe.readers import _read_process
from dlpipe.readers._read_process import ReadProcess
from dlpipe.readers.file import read_file

pytestmark = pytest.mark.skipif(not _read_process.available(), reason="needs memfd (Linux)")


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for i, size in enumerate([0, 1, 4096, 100_003, 7, 65_536]):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        paths.append(str(p))
    return paths


@pytest.mark.parametrize("processes, threads", [(1, 1), (2, 2), (3, 4)])
def test_reads_the_same_bytes_as_this_process(files, processes, threads):
    rp = ReadProcess("test", processes, threads)
    try:
        batch = files + files[::-1]  # a file twice in one batch (padding does that)
        got = rp.read(batch)
        assert len(got) == len(batch)
        for arr, path in zip(got, batch, strict=True):
            assert arr.dtype == np.uint8 and arr.ndim == 1 and arr.flags.writeable
            np.testing.assert_array_equal(arr, read_file(path))
    finally:
        rp.close()


def test_a_held_batch_is_never_overwritten_and_dropped_slots_come_back(files):
    rp = ReadProcess("test")
    try:
        first = rp.read(files[2:4])
        kept = [a.copy() for a in first]
        second = rp.read(files[3:1:-1])  # other files, same sizes reversed
        for a, b in zip(first, kept, strict=True):
            np.testing.assert_array_equal(a, b)  # a fresh slot: the held batch is intact
        assert len(rp._memfd.slots) == 2 and len(rp._pool) == 0
        del first, second, a, b
        assert len(rp._pool) == 2  # both free again; no third slot is made
        view = rp.read(files[2:3])[0][:10]  # a view of a sample keeps the slot too
        assert len(rp._pool) == 1
        del view
        assert len(rp._pool) == 2 and len(rp._memfd.slots) == 2
    finally:
        rp.close()


def test_only_what_is_used_is_mapped_and_slots_grow_for_a_larger_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(_read_process, "FIRST_SLOT_BYTES", 1 << 20)
    big = []
    for i, size in enumerate([700_000, 900_000, 10, 5]):  # parts of 1.6 MB, 15 B
        big.append(str(tmp_path / f"big{i}"))
        (tmp_path / f"big{i}").write_bytes(bytes([i]) * size)
    rp = ReadProcess("test", processes=2)
    try:
        small = rp.read(big[2:])
        assert [s.size for s in rp._memfd.slots.values()] == [1 << 20]
        assert os.fstat(rp._memfd.fd).st_size == 1 << 20  # the memfd holds one slot
        got = rp.read(big)  # a part of 1.6 MB > 0.5 MB: read again into a new slot
        for arr, path in zip(got, big, strict=True):
            np.testing.assert_array_equal(arr, read_file(path))
        # 2 parts of 1.6 MB and a quarter more, in whole MiB; the too-small one was dropped
        (grown,) = [s for s in rp._memfd.slots.values() if s.size > 1 << 20]
        assert grown.size == 4 << 20 and rp._size == 4 << 20
        del small
        again = rp.read(big[2:])  # the small free slot is dropped, a new one has the new size
        assert [s.size for s in rp._memfd.slots.values()] == [4 << 20, 4 << 20]
        assert [bytes(a) for a in again] == [b"\x02" * 10, b"\x03" * 5]
    finally:
        rp.close()


def test_a_batch_larger_than_the_largest_slot_or_with_no_slot_left_is_left_to_the_caller(
    files, monkeypatch
):
    rp = ReadProcess("test")
    try:
        monkeypatch.setattr(_read_process, "MAX_SLOT_BYTES", 50_000)
        monkeypatch.setattr(_read_process, "FIRST_SLOT_BYTES", 1 << 16)
        rp._size = 1 << 16
        assert rp.read(files[2:4]) is None  # 104 KB > 50 KB
        assert rp._size == 1 << 16  # one batch too large changes nothing for the others
        monkeypatch.setattr(_read_process, "SLOTS", 3)
        held = [rp.read(files[:1]) for _ in range(3)]
        assert all(h is not None for h in held) and rp.read(files[:1]) is None
        del held
        assert rp.read(files[:1]) is not None
    finally:
        rp.close()


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_missing_file_is_reported_with_its_path(files, processes):
    rp = ReadProcess("test", processes)
    try:
        err = rp.read([files[0], files[0] + ".gone"])
        assert isinstance(err, FileNotFoundError) and err.filename == files[0] + ".gone"
        assert err.sample_index == 1
        assert len(rp._pool) == len(rp._memfd.slots) == 1  # the slot came back
        # two missing files, in different processes' parts: the first in batch order
        batch = [files[2], files[3] + ".a", files[4], files[5], files[1] + ".b"]
        err = rp.read(batch)
        assert err.filename == files[3] + ".a" and err.sample_index == 1
        err = rp.read(batch[2:])  # the last part's file, at its place in the batch
        assert err.filename == files[1] + ".b" and err.sample_index == 2
        np.testing.assert_array_equal(rp.read(files[2:3])[0], read_file(files[2]))
    finally:
        rp.close()


def epoch(pipe, n):
    out = []
    for _ in range(n):
        data, labels = pipe.run()
        out += [(bytes(data.at(i)), int(labels.at(i)[0])) for i in range(len(data))]
    return out


def test_pipeline_output_matches_reading_in_process(image_root, monkeypatch):
    kw = {"random_shuffle": True, "num_shards": 2, "shard_id": 1, "pad_last_batch": True}
    with_process = file_reader_pipe(4, file_root=image_root, **kw)
    got = epoch(with_process, 6)
    assert with_process._readers["Reader"]._reads.process is not None
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")
    in_process = file_reader_pipe(4, file_root=image_root, **kw)
    assert epoch(in_process, 6) == got
    assert in_process._readers["Reader"]._reads.process is None
    with_process.close()
    in_process.close()


def test_the_pipelines_options_choose_how_many_processes(files):
    from dlpipe.options import RuntimeOptions

    opts = RuntimeOptions(read_processes=2)
    pipe = file_reader_pipe(3, files=files, pipe_kw={"runtime": opts})
    data, _ = pipe.run()
    assert len(pipe._readers["Reader"]._reads.process.helpers) == 2
    np.testing.assert_array_equal(data.at(2), read_file(files[2]))
    pipe.close()


def test_servers_that_do_not_start_leave_the_reads_to_this_process(files, tmp_path, monkeypatch):
    fake = tmp_path / "python3"  # looks like a Python, is not one
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr("sys.executable", str(fake))
    monkeypatch.setattr(_read_process, "_WARNED", [])
    pipe = file_reader_pipe(3, files=files)
    with pytest.warns(RuntimeWarning, match="reading files in the pipeline's process.*exit code 3"):
        data, _ = pipe.run()
    assert pipe._readers["Reader"]._reads.process is None
    for i in range(3):
        np.testing.assert_array_equal(data.at(i), read_file(files[i]))
    pipe.close()


@pytest.mark.parametrize("read_process", ["1", "0"])
def test_missing_file_in_a_pipeline_names_it_and_its_sample(
    tmp_path, files, monkeypatch, read_process
):
    monkeypatch.setenv("DLPIPE_READ_PROCESS", read_process)
    gone = str(tmp_path / "gone.jpg")
    pipe = file_reader_pipe(3, files=[files[2], gone, files[3]])
    with pytest.raises(DataNotFoundError) as err:
        pipe.run()
    message = str(err.value)
    assert "gone.jpg' no longer exists" in message
    assert f"sample 1 of iteration 0, file {gone!r}" in message
    pipe.close()


def test_a_killed_read_process_is_an_error_not_a_hang(files):
    # One iteration at a time: the kill lands between two of them.
    pipe = file_reader_pipe(2, pipe_kw={"exec_async": False}, files=files)
    pipe.run()
    proc = pipe._readers["Reader"]._reads.process.helpers[0]
    os.kill(proc.pid, signal.SIGKILL)
    proc._proc.wait()
    with pytest.raises(PipelineError, match=r"read process exited unexpectedly \(exit code -9"):
        for _ in range(3):
            pipe.run()
    pipe.close()


def test_after_one_process_died_the_others_are_not_asked_again(files):
    # A survivor may owe a reply to the failed batch: reading on would pair the replies with
    # the wrong batches, so every later read is the same error, and every process is ended.
    rp = ReadProcess("test", processes=2)
    survivor, victim = rp.helpers
    assert len(rp.read(files)) == len(files)
    os.kill(victim.pid, signal.SIGKILL)
    victim._proc.wait()
    for _ in range(2):
        with pytest.raises(PipelineError, match=r"exited unexpectedly \(exit code -9\)"):
            rp.read(files)
    assert survivor._proc.wait(timeout=10) == 0
    assert len(rp._pool) == 1  # the slot of the failed batch came back


def test_close_ends_the_process_and_a_batch_outlives_it(files):
    pipe = file_reader_pipe(3, files=files)
    data, _ = pipe.run()
    reader = pipe._readers["Reader"]
    procs = list(reader._reads.process.helpers)
    pipe.close()
    assert [p.poll() for p in procs] == [0] * _read_process.PROCESSES
    assert reader._reads.process is None
    np.testing.assert_array_equal(data.at(2), read_file(files[2]))  # still mapped


def test_a_dropped_reader_ends_its_process(files):
    rp = ReadProcess("test", processes=2)
    procs = [h._proc for h in rp.helpers]
    del rp
    assert [p.wait(timeout=10) for p in procs] == [0, 0]


def test_a_forked_child_gets_its_own_read_process(files):
    # A reader used in a child forked after its read process started must not send requests
    # down the parent's pipes (the replies would go to whichever process reads first).
    # No stage threads (synchronous pipeline): nothing runs in the parent while it forks.
    pipe = file_reader_pipe(2, pipe_kw={"exec_async": False}, files=files[2:4])
    pipe.run()
    reader = pipe._readers["Reader"]
    parent_proc = reader._reads.process.helpers[0]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read through the operator directly (no executor threads here)
        ok = 0
        try:
            data, _ = reader.run_batch_cpu([], {}, [0, 1])
            same = all(
                np.array_equal(a, read_file(p)) for a, p in zip(data, files[2:4], strict=True)
            )
            ok = int(same and reader._reads.process.helpers[0].pid != parent_proc.pid)
        finally:
            os.write(w, bytes([ok]))
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"\x01"
    os.close(r)
    os.waitpid(pid, 0)
    data, _ = pipe.run()  # the parent's read process still answers the parent
    assert reader._reads.process.helpers[0] is parent_proc and len(data) == 2
    pipe.close()


def test_a_batch_is_found_in_its_shared_region_until_the_reader_closes(files):
    # what lets a decode process decode the batch where it lies (_ipc.regions.locate)
    from dlpipe._ipc import regions

    rp = ReadProcess("test", processes=2)
    try:
        batch = rp.read(files)
        region, offsets = regions.locate(batch)
        (slot,) = rp._memfd.slots.values()
        assert (region.offset, region.size) == (slot.offset, slot.size)
        memory = np.frombuffer(slot.memory, np.uint8)
        for off, arr, path in zip(offsets, batch, files, strict=True):
            np.testing.assert_array_equal(memory[off : off + arr.size], read_file(path))
        assert os.stat(region.path).st_ino == region.inode  # the path opens the memfd
        del memory
    finally:
        rp.close()
    assert regions.locate(batch) is None  # its fd is closed: nobody may open it now


def test_a_request_cut_by_ctrl_c_is_mended_by_fresh_processes(files, monkeypatch):
    # A pipeline run on the caller's thread (exec_async=False): Ctrl-C may land while a
    # request waits for its reply. That reply may come later, so the processes are replaced.
    from dlpipe._ipc import wire

    rp = ReadProcess("test", processes=2)
    try:
        assert len(rp.read(files)) == len(files)
        read, calls = wire.Reader.read, []

        def interrupted(reader):
            calls.append(reader.fd)
            if len(calls) == 1:
                raise KeyboardInterrupt
            return read(reader)

        monkeypatch.setattr(wire.Reader, "read", interrupted)
        with pytest.raises(KeyboardInterrupt):
            rp.read(files)
        monkeypatch.setattr(wire.Reader, "read", read)
        old = list(rp.helpers)
        assert old[0].interrupted and "interrupted (KeyboardInterrupt)" in old[0].failure
        got = rp.read(files)
        assert all(h.poll() is not None for h in old) and rp.helpers[0] is not old[0]
        for arr, path in zip(got, files, strict=True):
            np.testing.assert_array_equal(arr, read_file(path))
    finally:
        rp.close()
