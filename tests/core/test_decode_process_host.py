"""The decode server's packing of a batch's images into one device buffer (pure host logic,
so it runs in CI; the server itself is tested on the GPU in tests/gpu/test_decode_process.py)."""

from __future__ import annotations

import numpy as np

from dlpipe.decoders import _decode_process
from dlpipe.decoders._decode_server import ALIGN, layout


class _Image:
    def __init__(self, *shape, ptr=0, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "|u1", "data": (ptr, False)}
        if strides:
            self.__cuda_array_interface__["strides"] = strides


def test_images_are_packed_in_order_aligned_and_failures_marked():
    images = [
        _Image(3, 5, 3, ptr=1000),
        None,
        _Image(100, 200, 3, ptr=2000, strides=(640, 3, 1)),  # pitched rows
        _Image(7, 9, 1, ptr=3000),
        _Image(4, 4, ptr=4000),
    ]
    offsets, shapes, total, ptrs, pitches = layout(images)
    sizes = [45, 0, 60000, 63, 16]
    want, pos = [], 0
    for img, size in zip(images, sizes, strict=True):
        want.append(-1 if img is None else pos)
        if img is not None:
            pos += -(-size // ALIGN) * ALIGN
    assert offsets.tolist() == want == [0, -1, 256, 60416, 60672]
    assert shapes.tolist() == [[3, 5, 3], [0, 0, 0], [100, 200, 3], [7, 9, 1], [4, 4, 1]]
    assert total == pos == 60928
    assert all(o % ALIGN == 0 for o in offsets if o >= 0)
    assert ptrs == [1000, 2000, 3000, 4000]  # the images that are there
    assert pitches == [15, 640, 9, 4]


def test_decode_process_can_be_turned_off(monkeypatch):
    from dlpipe.options import RuntimeOptions

    assert _decode_process.available() == hasattr(__import__("os"), "memfd_create")
    monkeypatch.setenv("DLPIPE_DECODE_PROCESS", "0")
    assert not RuntimeOptions.from_env().decode_process
    monkeypatch.delenv("DLPIPE_DECODE_PROCESS")
    assert RuntimeOptions.from_env().decode_process


class _Event:
    def __init__(self, done: bool):
        self.done, self.waited = done, False

    def synchronize(self):
        self.waited, self.done = True, True


class _Memory:
    count = 0

    def __init__(self, size: int):
        _Memory.count += 1
        self.size, self.ptr = size, _Memory.count << 32


class _Cupy:
    """The few CuPy calls the slot bookkeeping makes."""

    class cuda:  # noqa: N801
        class memory:  # noqa: N801
            Memory = _Memory

        class runtime:  # noqa: N801
            ipcGetMemHandle = staticmethod(lambda ptr: b"handle-%d" % ptr)  # noqa: N815

        class Device:
            def __init__(self, device_id):
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False


def _client():
    """A DecodeProcess without its server: what it would send is recorded."""
    proc = _decode_process.DecodeProcess.__new__(_decode_process.DecodeProcess)
    proc.cupy, proc.device_id, proc.who = _Cupy, 0, "decoders.image"
    proc._slots, proc._free, proc._dropped, proc._largest, proc._next_slot = {}, [], [], 0, 0
    proc._mapped = {}
    proc.sent = []
    proc._send = proc.sent.append
    proc._recv = lambda: proc._dropped.clear() or ("pong",)
    return proc


def test_a_slot_whose_gpu_work_is_pending_is_not_handed_out_while_others_can_be_made():
    proc = _client()
    first = proc._slot(1000)
    assert proc.sent == [("open", first, b"handle-%d" % proc._slots[first].ptr, 1000)]
    pending = _Event(done=False)
    proc._free.append((first, pending))
    # fewer than SPARE_SLOTS free slots are still being read: a new slot, no waiting
    second = proc._slot(1000)
    assert second != first and not pending.waited
    proc._free.append((second, _Event(done=False)))
    assert len(proc._free) == _decode_process.SPARE_SLOTS
    # now as many wait as may: the oldest is taken once its work has passed
    assert proc._slot(1000) == first and pending.waited
    assert len(proc._slots) == 2


def test_a_slot_whose_work_has_passed_is_taken_before_older_pending_ones():
    proc = _client()
    a, b = proc._slot(10), proc._slot(10)
    proc._free += [(a, _Event(done=False)), (b, _Event(done=True))]
    assert proc._slot(10) == b
    assert [s for s, _ in proc._free] == [a]


def test_slots_smaller_than_the_largest_batch_are_dropped_and_new_ones_have_room():
    proc = _client()
    small = proc._slot(100)
    proc._free.append((small, _Event(done=True)))
    proc._largest = 400
    big = proc._slot(100)
    assert small not in proc._slots and big in proc._slots
    assert ("drop", small) in proc.sent
    assert proc._slots[big].size == 500  # the largest batch, and a quarter
    assert len(proc._dropped) == 1  # kept until the server has closed its mapping


def test_trim_frees_every_free_slot_once_the_server_has_closed_them():
    proc = _client()
    slots = [proc._slot(64) for _ in range(3)]
    proc._largest = 64
    proc._free += [(slots[0], _Event(done=False)), (slots[1], None)]
    proc.trim()
    assert set(proc._slots) == {slots[2]}  # the one a batch still holds stays
    # the server lets go of its kept images too, and has done all that before trim returns
    assert proc.sent[-2:] == [("trim",), ("ping",)]
    assert not proc._dropped and proc._largest == 0


class _Proc:
    def __init__(self, name, failure="", started=True):
        self.name, self.failure, self.started, self.device_id = name, failure, started, 0
        self.closed = self.trimmed = False
        self._free = []  # slots let go of since the last trim

    def ready(self):
        return self.started

    def trim(self):
        if self.failure:
            raise RuntimeError(self.failure)
        self.trimmed = True
        self._free.clear()

    def close(self):
        self.closed = True


def test_give_back_keeps_healthy_processes_up_to_the_limit_and_stops_the_rest(monkeypatch):
    monkeypatch.setattr(_decode_process, "_IDLE", {0: [_Proc("old")]})
    monkeypatch.setattr(_decode_process, "IDLE_PROCESSES", 3)
    procs = [_Proc("a"), _Proc("dead", failure="exited"), _Proc("b"), _Proc("c", started=False)]
    mine = list(procs)
    _decode_process.give_back(mine)
    assert mine == []  # the operator holds none any more
    idle = _decode_process._IDLE[0]
    assert [p.name for p in idle] == ["old", "b", "a"] and all(p.trimmed for p in idle[1:])
    assert procs[1].closed and procs[3].closed and not any(p.closed for p in idle)
    _decode_process.give_back([_Proc("d")])  # one too many: the oldest idle one stops
    assert [p.name for p in idle] == ["b", "a", "d"]
    assert _decode_process.take(0).name == "d"  # the most recently used first


class _Stream:
    def __init__(self):
        self.waited = []

    def wait_event(self, event):
        self.waited.append(event)


def test_decode_writes_the_batch_back_to_back_and_points_into_its_slot(monkeypatch):
    import os

    import numpy as np

    monkeypatch.setattr(_decode_process, "_release", lambda *a: None)
    proc = _client()
    proc._fd = os.memfd_create("test-decode", 0)
    proc._event = "server-event"
    samples = [((np.arange(n) + n) % 256).astype(np.uint8) for n in (5, 0, 300, 17)]
    # the server's reply: samples 0, 2 and 3 decoded, sample 1 not
    offsets = np.array([0, -1, 256, 512], np.int64)
    shapes = np.array([[2, 2, 3], [0, 0, 0], [4, 4, 3], [1, 1, 3]], np.int64)
    proc._recv = lambda: ("ok", offsets, shapes, 768)
    stream = _Stream()
    try:
        lease, ptrs, got_shapes = proc.decode(samples, stream)
        written = os.pread(proc._fd, 1000, 0)
    finally:
        os.close(proc._fd)
    assert written == b"".join(s.tobytes() for s in samples)  # back to back, from offset 0
    (request,) = [m for m in proc.sent if m[0] == "decode"]
    slot = request[1]
    assert request == ("decode", slot, [5, 0, 300, 17], None)  # not in a shared region
    base = proc._slots[slot].ptr
    assert ptrs.dtype == np.uint64 and ptrs.tolist() == [base, 0, base + 256, base + 512]
    assert got_shapes is shapes and lease.memory is proc._slots[slot]
    assert stream.waited == ["server-event"]  # the lane waits for the server's copies
    assert proc._largest == 768


def test_take_frees_the_slots_let_go_of_while_idle(monkeypatch):
    # A batch held past the pipeline's close lets go of its slot when the process is idle:
    # the next pipeline's take() frees it (and skips a process that died meanwhile).
    fresh = _Proc("fresh")
    monkeypatch.setattr(_decode_process, "DecodeProcess", lambda device_id: fresh)
    held, died = _Proc("held"), _Proc("died")
    held._free.append((7, None))
    died._free.append((8, None))
    died.failure = "exited"
    monkeypatch.setattr(_decode_process, "_IDLE", {0: [held, died]})
    assert _decode_process.take(0) is held  # 'died' (the newer) failed to trim: stopped
    assert died.closed and held.trimmed and not held._free
    assert _decode_process.take(0) is fresh  # none idle any more


def _shared(nbytes=1 << 16):
    """A memfd mapped here and shared, as a read process's slots are."""
    import mmap
    import os

    from dlpipe import _helper_process

    fd = os.memfd_create("test-region", 0)
    os.ftruncate(fd, nbytes)
    memory = mmap.mmap(fd, nbytes)
    _helper_process.share(memory, fd)
    return memory, fd


def test_samples_in_a_read_slot_are_decoded_where_they_lie(monkeypatch):
    import os

    from dlpipe import _helper_process

    monkeypatch.setattr(_decode_process, "_release", lambda *a: None)
    memory, fd = _shared()
    try:
        region = _helper_process._REGIONS[memory]
        # a batch's views of one slot, as ReadProcess.read hands them out
        base = np.frombuffer(memory, np.uint8, count=1000, offset=4096)
        samples = [base[0:5], base[5:305], base[400:417], base[0:5]]
        proc = _client()
        proc._fd = -1  # a pwritev would fail: nothing is copied
        proc._event = "server-event"
        ok = ("ok", np.zeros(4, np.int64), np.ones((4, 3), np.int64), 768)
        replies = iter([("mapped", True), ok, ok])
        proc._recv = lambda: next(replies)
        stream = _Stream()
        proc.decode(samples, stream)
        proc.decode(samples[1:3], stream)  # mapped already: not asked again
        maps = [m for m in proc.sent if m[0] == "map"]
        assert maps == [("map", region.key, f"/proc/{os.getpid()}/fd/{fd}", 1 << 16, region.inode)]
        first, second = [m for m in proc.sent if m[0] == "decode"]
        assert first[2:] == ([5, 300, 17, 5], (region.key, [4096, 4101, 4496, 4096]))
        assert second[2:] == ([300, 17], (region.key, [4101, 4496]))
        # a sample from elsewhere in the batch: the batch goes through the memfd instead
        assert _helper_process.locate([*samples, np.zeros(3, np.uint8)]) is None
        _helper_process.unshare(memory)
        assert _helper_process.locate(samples) is None
    finally:
        os.close(fd)


def test_a_region_the_server_cannot_map_is_copied_instead(monkeypatch):
    import os

    monkeypatch.setattr(_decode_process, "_release", lambda *a: None)
    memory, fd = _shared()
    out = os.memfd_create("test-decode", 0)
    try:
        memory[100:110] = bytes(range(10))
        samples = [np.frombuffer(memory, np.uint8, count=10, offset=100)[2:7]]
        proc = _client()
        proc._fd, proc._event = out, "server-event"
        ok = ("ok", np.zeros(1, np.int64), np.ones((1, 3), np.int64), 256)
        replies = iter([("mapped", False), ok, ok])
        proc._recv = lambda: next(replies)
        proc.decode(samples, _Stream())
        proc.decode(samples, _Stream())  # not asked again either
        assert [m[0] for m in proc.sent if m[0] in ("map", "decode")] == ["map", "decode", "decode"]
        assert all(m[3] is None for m in proc.sent if m[0] == "decode")
        assert os.pread(out, 5, 0) == bytes(range(2, 7))
    finally:
        os.close(fd)
        os.close(out)


def test_a_shared_region_opens_in_another_process_only_as_itself(tmp_path):
    # the server's side, in this process: the path opens the same memory; a path whose fd
    # number names another file by now (another inode) is refused, as is one that is gone
    import os
    import subprocess
    import sys

    from dlpipe import _helper_process

    memory, fd = _shared(8192)
    try:
        memory[:5] = b"hello"
        r = _helper_process._REGIONS[memory]
        code = (
            "import sys; from dlpipe._helper_process import open_region as o; "
            f"m = o({r.path!r}, {r.size}, {r.inode}); "
            f"bad = o({r.path!r}, {r.size}, {r.inode + 1}), o('/proc/no/such', 1, 1); "
            "sys.stdout.write(repr((bytes(m[:5]), bad)))"
        )
        # the child opens the parent's /proc path, as a decode server does
        got = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        assert got == "(b'hello', (None, None))"
    finally:
        _helper_process.unshare(memory)
        os.close(fd)


def test_copy_descriptors_cut_contiguous_images_into_chunks_and_keep_pitched_rows():
    from dlpipe.kernels.copy import CHUNK, copy_descriptors

    # a contiguous 100x200x3 image, a pitched one (rows 640 bytes apart), a 1-row image
    d = copy_descriptors(
        [1000, 2000, 3000], [0, 60_160, 72_960], [600, 640, 9], [600, 600, 9], [100, 20, 1]
    )
    assert d["src"].tolist() == [1000, 2000, 3000] and d["dst"].tolist() == [0, 60_160, 72_960]
    assert d["total"].tolist() == [60_000, 12_000, 9]  # every byte of each image, once
    # contiguous: any row length will do, so CHUNK-byte rows (the last one shorter)
    assert d["row_bytes"].tolist() == [CHUNK, 600, CHUNK]
    assert d["src_pitch"].tolist() == [CHUNK, 640, CHUNK]
    rows = -(-d["total"] // d["row_bytes"])
    assert rows.tolist() == [-(-60_000 // CHUNK), 20, 1]
