"""The decode process on the host: the server's packing of a batch's images into one device
buffer, the client's slots, regions and messages (with the server replaced by a recorder), and
what the server imports. The server itself is tested on the GPU in
tests/gpu/test_decode_process.py."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from dlpipe._ipc.regions import Map, MappedRegions, Unmap
from dlpipe.decoders import _decode_process
from dlpipe.decoders._decode_server import (
    ALIGN,
    CopyInto,
    Decode,
    Decoded,
    Drop,
    Open,
    Ping,
    TooSmall,
    Trim,
    layout,
    pack,
    refusals,
)


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


def test_places_from_headers_are_the_places_of_the_decoded_images():
    # The server lays a batch out from its headers (pack) before decoding straight into the
    # slot; the copy path lays decoded images out (layout): the same offsets and total.
    rng = np.random.default_rng(5)
    shapes = np.stack([rng.integers(1, 700, 40), rng.integers(1, 900, 40), np.full(40, 3)], 1)
    shapes[7] = (1, 1, 1)
    offsets, total = pack(shapes)
    want, _, want_total, _, _ = layout([_Image(*map(int, s)) for s in shapes])
    assert offsets.tolist() == want.tolist() and total == want_total
    assert offsets.dtype == np.int64 and all(o % ALIGN == 0 for o in offsets)
    assert pack(np.zeros((0, 3), np.int64))[1] == 0


def _jpeg(h=16, w=24, quality=90) -> np.ndarray:
    import cv2

    img = (np.arange(h * w * 3) % 251).astype(np.uint8).reshape(h, w, 3)
    return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])[1].ravel()


def test_the_server_refuses_what_the_decoders_checks_refuse():
    """Header checks the decode server makes for the pipeline's process: a header claiming
    more than max_pixels, a JPEG cut before its end marker; a short sample is left to the CPU
    decoder and a good JPEG passes."""
    good = _jpeg()
    bomb = good.copy()
    frame = bytes(good).find(b"\xff\xc0")  # SOF0: length(2) precision(1) height(2) width(2)
    bomb[frame + 5 : frame + 9] = [0xEA, 0x60, 0xEA, 0x60]  # 60000 x 60000
    cut = good[: good.size // 2]
    blobs = [good, bomb, np.zeros(2, np.uint8), cut, good]
    got = refusals(blobs, max_pixels=1 << 28)
    assert got == {1: ("size", "JPEG", 60000, 60000), 3: ("truncated", cut.size)}
    assert refusals(blobs, max_pixels=None) == {3: ("truncated", cut.size)}
    assert refusals([good], max_pixels=16 * 24) == {}
    assert refusals([good], max_pixels=16 * 24 - 1) == {0: ("size", "JPEG", 16, 24)}


def test_decode_process_can_be_turned_off(monkeypatch):
    from dlpipe.options import RuntimeOptions

    assert _decode_process.available() == hasattr(__import__("os"), "memfd_create")
    monkeypatch.setenv("DLPIPE_DECODE_PROCESS", "0")
    assert not RuntimeOptions.from_env().decode_process
    monkeypatch.delenv("DLPIPE_DECODE_PROCESS")
    assert RuntimeOptions.from_env().decode_process


@pytest.fixture(autouse=True)
def _no_cuda_events(monkeypatch):
    """A batch's slot comes back with no event (there is no GPU here), unless a test says."""
    monkeypatch.setattr(_decode_process, "_record", lambda *a: None)


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


class _Helper:
    """A HelperProcess without its server: what is sent is recorded, requests answered from
    ``replies`` (or "pong")."""

    interrupted = False

    def __init__(self):
        self.sent, self.replies = [], []

    def notify(self, message):
        self.sent.append(message)

    def request(self, message):
        self.sent.append(message)
        return self.replies.pop(0) if self.replies else "pong"


def _client():
    """A DecodeProcess without its server."""
    import functools

    from dlpipe._ipc.slots import SlotPool

    proc = _decode_process.DecodeProcess.__new__(_decode_process.DecodeProcess)
    proc.cupy, proc.device_id, proc.who = _Cupy, 0, "decoders.image"
    proc._helper = helper = _Helper()
    proc._dropped, proc._largest, proc._next_slot, proc._mapped = [], 0, 0, MappedRegions()
    proc._pool = SlotPool(drop=functools.partial(_decode_process._drop, helper, proc._dropped))
    proc.failure = ""
    proc.sent = helper.sent
    return proc


def _kinds(proc) -> list[str]:
    return [type(m).__name__ for m in proc.sent]


def test_a_slot_whose_gpu_work_is_pending_is_not_handed_out_while_others_can_be_made():
    proc = _client()
    first = proc._slot(1000)
    assert proc.sent == [Open(first.id, b"handle-%d" % first.memory.ptr, 1000)]
    pending = _Event(done=False)
    proc._pool.put(first, pending)
    # fewer than SPARE_SLOTS free slots are still being read: a new slot, no waiting
    second = proc._slot(1000)
    assert second is not first and not pending.waited
    proc._pool.put(second, _Event(done=False))
    assert len(proc._pool) == _decode_process.SPARE_SLOTS
    # now as many wait as may: the oldest is taken once its work has passed
    assert proc._slot(1000) is first and pending.waited
    assert _kinds(proc) == ["Open", "Open"]


def test_a_slot_whose_work_has_passed_is_taken_before_older_pending_ones():
    proc = _client()
    a, b = proc._slot(10), proc._slot(10)
    proc._pool.put(a, _Event(done=False))
    proc._pool.put(b, _Event(done=True))
    assert proc._slot(10) is b
    assert proc._pool.free_slots() == [a]


def test_slots_smaller_than_the_largest_batch_are_dropped_and_new_ones_have_room():
    proc = _client()
    small = proc._slot(100)
    proc._pool.put(small, _Event(done=True))
    proc._largest = 400
    big = proc._slot(100)
    assert Drop(small.id) in proc.sent and big is not small
    assert big.memory.size == 500  # the largest batch, and a quarter
    assert proc._dropped == [small.memory]  # kept until the server has closed its mapping


def test_trim_frees_every_free_slot_once_the_server_has_closed_them():
    proc = _client()
    slots = [proc._slot(64) for _ in range(3)]
    proc._largest = 64
    pending = _Event(done=False)
    proc._pool.put(slots[0], pending)
    proc._pool.put(slots[1])
    proc.trim()
    assert pending.waited and proc.idle_slots() == 0  # the one a batch still holds stays out
    # the server lets go of its kept images too, and has done all that before trim returns
    assert proc.sent[-4:] == [Drop(slots[0].id), Drop(slots[1].id), Trim(), Ping()]
    assert not proc._dropped and proc._largest == 0


def test_a_batch_holds_its_slot_and_gives_it_back_with_an_event_on_the_lane_stream(monkeypatch):
    recorded = []
    monkeypatch.setattr(
        _decode_process, "_record", lambda cupy, stream, dev: recorded.append(stream) or "ev"
    )
    proc = _client()
    proc._fd = os.memfd_create("test-decode", 0)
    proc._event = "server-event"
    proc._helper.replies = [_decoded(1, 256)]
    stream = _Stream()
    try:
        lease, _, _, _ = proc.decode([np.zeros(3, np.uint8)], stream)
    finally:
        os.close(proc._fd)
    assert lease.slot.memory.size >= 256 and proc.idle_slots() == 0
    del lease  # the batch's last reference: the slot comes back, after the lane's work
    assert recorded == [stream] and proc._pool._free[0][1] == "ev"


class _Proc:
    def __init__(self, name, failure="", started=True):
        self.name, self.failure, self.started, self.device_id = name, failure, started, 0
        self.closed = self.trimmed = False
        self.free = []  # slots let go of since the last trim

    def ready(self):
        return self.started

    def idle_slots(self):
        return len(self.free)

    def trim(self):
        if self.failure:
            raise RuntimeError(self.failure)
        self.trimmed = True
        self.free.clear()

    def close(self):
        self.closed = True


def test_give_back_keeps_healthy_processes_up_to_the_limit_and_stops_the_rest(monkeypatch):
    monkeypatch.setattr(_decode_process, "_IDLE", {0: [_Proc("old")]})
    procs = [_Proc("a"), _Proc("dead", failure="exited"), _Proc("b"), _Proc("c", started=False)]
    mine = list(procs)
    _decode_process.give_back(mine, keep=3)  # RuntimeOptions.idle_decode_processes
    assert mine == []  # the operator holds none any more
    idle = _decode_process._IDLE[0]
    assert [p.name for p in idle] == ["old", "b", "a"] and all(p.trimmed for p in idle[1:])
    assert procs[1].closed and procs[3].closed and not any(p.closed for p in idle)
    _decode_process.give_back([_Proc("d")], keep=3)  # one too many: the oldest idle one stops
    assert [p.name for p in idle] == ["b", "a", "d"]
    assert _decode_process.take(0).name == "d"  # the most recently used first


class _Stream:
    def __init__(self):
        self.waited = []

    def wait_event(self, event):
        self.waited.append(event)


def _decoded(n, nbytes):
    return Decoded(np.arange(n, dtype=np.int64) * 256, np.ones((n, 3), np.int64), nbytes)


def test_decode_writes_the_batch_back_to_back_and_points_into_its_slot():
    proc = _client()
    proc._fd = os.memfd_create("test-decode", 0)
    proc._event = "server-event"
    samples = [((np.arange(n) + n) % 256).astype(np.uint8) for n in (5, 0, 300, 17)]
    # the server's reply: samples 0, 2 and 3 decoded, sample 1 not
    offsets = np.array([0, -1, 256, 512], np.int64)
    shapes = np.array([[2, 2, 3], [0, 0, 0], [4, 4, 3], [1, 1, 3]], np.int64)
    proc._helper.replies = [Decoded(offsets, shapes, 768)]
    stream = _Stream()
    try:
        lease, ptrs, got_shapes, refused = proc.decode(samples, stream)
        written = os.pread(proc._fd, 1000, 0)
    finally:
        os.close(proc._fd)
    assert written == b"".join(s.tobytes() for s in samples)  # back to back, from offset 0
    (request,) = [m for m in proc.sent if isinstance(m, Decode)]
    slot = lease.slot
    assert request == Decode(slot.id, [5, 0, 300, 17], None)  # not in a shared region
    base = slot.memory.ptr
    assert ptrs.dtype == np.uint64 and ptrs.tolist() == [base, 0, base + 256, base + 512]
    assert got_shapes is shapes and refused == {}
    assert stream.waited == ["server-event"]  # the lane waits for the server's copies
    assert proc._largest == 768


def test_images_larger_than_the_slot_are_copied_into_a_larger_one():
    proc = _client()
    proc._fd = os.memfd_create("test-decode", 0)
    proc._event = "server-event"
    proc._helper.replies = [TooSmall(5 << 20), _decoded(2, 5 << 20)]
    try:
        lease, _, _, _ = proc.decode([np.zeros(10, np.uint8)] * 2, _Stream())
    finally:
        os.close(proc._fd)
    first, second = [m for m in proc.sent if isinstance(m, Open)]
    assert first.nbytes == 1 << 20 and second.nbytes == (5 << 20) * 5 // 4  # and a quarter
    assert Drop(first.slot) in proc.sent and proc.sent[-1] == CopyInto(second.slot)
    assert lease.slot.id == second.slot and not proc._dropped  # closed by the reply


def test_take_frees_the_slots_let_go_of_while_idle(monkeypatch):
    # A batch held past the pipeline's close lets go of its slot when the process is idle:
    # the next pipeline's take() frees it (and skips a process that died meanwhile).
    fresh = _Proc("fresh")
    monkeypatch.setattr(_decode_process, "DecodeProcess", lambda device_id: fresh)
    held, died = _Proc("held"), _Proc("died")
    held.free.append((7, None))
    died.free.append((8, None))
    died.failure = "exited"
    monkeypatch.setattr(_decode_process, "_IDLE", {0: [held, died]})
    assert _decode_process.take(0) is held  # 'died' (the newer) failed to trim: stopped
    assert died.closed and held.trimmed and not held.free
    assert _decode_process.take(0) is fresh  # none idle any more


def _shared(nbytes=1 << 16):
    """A memfd mapped here and shared, as a read process's slots are."""
    import mmap
    import os

    from dlpipe._ipc import regions

    fd = os.memfd_create("test-region", 0)
    os.ftruncate(fd, nbytes)
    memory = mmap.mmap(fd, nbytes)
    regions.share(memory, fd)
    return memory, fd


def test_samples_in_a_read_slot_are_decoded_where_they_lie():
    from dlpipe._ipc import regions

    memory, fd = _shared()
    try:
        region = regions._REGIONS[memory]
        # a batch's views of one slot, as ReadProcess.read hands them out
        base = np.frombuffer(memory, np.uint8, count=1000, offset=4096)
        samples = [base[0:5], base[5:305], base[400:417], base[0:5]]
        proc = _client()
        proc._fd = -1  # a pwritev would fail: nothing is copied
        proc._event = "server-event"
        proc._helper.replies = [True, _decoded(4, 1024), _decoded(2, 512)]
        stream = _Stream()
        proc.decode(samples, stream)
        proc.decode(samples[1:3], stream)  # mapped already: not asked again
        maps = [m for m in proc.sent if isinstance(m, Map)]
        path = f"/proc/{os.getpid()}/fd/{fd}"
        assert maps == [Map(region.key, path, 0, 1 << 16, region.inode)]
        first, second = [m for m in proc.sent if isinstance(m, Decode)]
        assert (first.sizes, first.source) == (
            [5, 300, 17, 5],
            (region.key, [4096, 4101, 4496, 4096]),
        )
        assert (second.sizes, second.source) == ([300, 17], (region.key, [4101, 4496]))
        # a sample from elsewhere in the batch: the batch goes through the memfd instead
        assert regions.locate([*samples, np.zeros(3, np.uint8)]) is None
        regions.unshare(memory)
        assert regions.locate(samples) is None
        # a region gone in the reader is let go of when the next one is asked for
        other, other_fd = _shared()
        try:
            proc._helper.replies = [True, _decoded(1, 256)]
            proc.decode([np.frombuffer(other, np.uint8, count=8)], stream)
            assert [type(m).__name__ for m in proc.sent[-3:]] == ["Unmap", "Map", "Decode"]
            assert proc.sent[-3] == Unmap(region.key) and list(proc._mapped.answers) != [region.key]
        finally:
            regions.unshare(other)
            os.close(other_fd)
    finally:
        os.close(fd)


def test_a_region_the_server_cannot_map_is_copied_instead():
    memory, fd = _shared()
    out = os.memfd_create("test-decode", 0)
    try:
        memory[100:110] = bytes(range(10))
        samples = [np.frombuffer(memory, np.uint8, count=10, offset=100)[2:7]]
        proc = _client()
        proc._fd, proc._event = out, "server-event"
        proc._helper.replies = [False, _decoded(1, 256), _decoded(1, 256)]
        proc.decode(samples, _Stream())
        proc.decode(samples, _Stream())  # not asked again either
        assert [k for k in _kinds(proc) if k in ("Map", "Decode")] == ["Map", "Decode", "Decode"]
        assert all(m.source is None for m in proc.sent if isinstance(m, Decode))
        assert os.pread(out, 5, 0) == bytes(range(2, 7))
    finally:
        from dlpipe._ipc import regions

        regions.unshare(memory)
        os.close(fd)
        os.close(out)


def test_a_shared_region_opens_in_another_process_only_as_itself(tmp_path):
    # the server's side, in this process: the path opens the same memory; a path whose fd
    # number names another file by now (another inode) is refused, as is one that is gone
    import os
    import subprocess
    import sys

    from dlpipe._ipc import regions

    memory, fd = _shared(8192)
    try:
        memory[:5] = b"hello"
        r = regions._REGIONS[memory]
        code = (
            "import sys; from dlpipe._ipc.regions import open_region as o; "
            f"m = o({r.path!r}, 0, {r.size}, {r.inode}); "
            f"bad = o({r.path!r}, 0, {r.size}, {r.inode + 1}), o('/proc/no/such', 0, 1, 1); "
            "sys.stdout.write(repr((bytes(m[:5]), bad)))"
        )
        # the child opens the parent's /proc path, as a decode server does
        got = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        assert got == "(b'hello', (None, None))"
    finally:
        regions.unshare(memory)
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


def test_the_decode_server_imports_neither_the_registry_nor_opencv_nor_pillow():
    # as a decode process starts it (_ipc/boot.py): dlpipe's __init__ not run, no site
    core = os.path.dirname(_decode_process.__file__).rsplit(os.sep, 1)[0]
    code = (
        "import importlib.util, sys, os\n"
        f"core = {core!r}\n"
        "spec = importlib.util.spec_from_file_location('dlpipe', os.path.join(core, "
        "'__init__.py'), submodule_search_locations=[core])\n"
        "sys.modules['dlpipe'] = importlib.util.module_from_spec(spec)\n"
        f"sys.path += {[p for p in sys.path if p]!r}\n"
        "import dlpipe.decoders._decode_server as s\n"
        "assert callable(s.handler)\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    modules = set(out.stdout.split())
    assert {"dlpipe.decoders._decode_server", "dlpipe._ipc.regions", "numpy"} <= modules
    assert not {"cv2", "PIL", "dlpipe.graph", "dlpipe.fn", "dlpipe.decoders.image"} & modules
    assert not [m for m in modules if m.startswith("dlpipe.operators")]
