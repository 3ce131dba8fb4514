"""``_ipc.process``: the one way a helper process is started, spoken to and stopped, with a
small server written here (any module with ``handler(**args)`` can be one)."""

from __future__ import annotations

import os
import signal
import sys
import textwrap

import pytest

from dlpipe._ipc import process
from dlpipe._ipc.process import HelperError, HelperProcess, HelperStartError

pytestmark = pytest.mark.skipif(not process.supported(), reason="needs memfd (Linux)")

SERVER = """
import os, sys

def handler(scale=1, fail_at_start=False):
    if fail_at_start:
        raise RuntimeError("no device here")
    seen = []

    def handle(msg):
        kind, value = msg
        if kind == "add":  # a notification: no reply
            seen.append(value * scale)
            return None
        if kind == "seen":
            return list(seen)
        if kind == "boom":
            explode(value)
        if kind == "modules":
            return sorted(sys.modules)
        if kind == "stdout":
            print("a library printing")  # must not reach the reply pipe
            return "still fine"
        raise ValueError(f"unknown {kind!r}")

    return handle

def explode(value):
    raise KeyError(value)
"""


@pytest.fixture
def echo(tmp_path, monkeypatch):
    """The name of a server module on this process's path (sent to the helper)."""
    (tmp_path / "echo_server.py").write_text(textwrap.dedent(SERVER))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "echo_server"


def start(module, **args):
    return HelperProcess("echo process", module, args, path=True)


def test_requests_get_replies_in_order_and_notifications_none(echo):
    h = start(echo, scale=10)
    try:
        for v in (1, 2, 3):
            h.notify(("add", v))
        assert h.request(("seen", None)) == [10, 20, 30]  # every notification came first
        h.submit(("add", 4))  # a request whose handler returns None: its reply is None
        h.submit(("seen", None))
        assert [h.result(), h.result()] == [None, [10, 20, 30, 40]]
        assert h.request(("stdout", None)) == "still fine"
    finally:
        h.stop()
    assert h.poll() == 0


def test_a_server_error_is_raised_with_its_traceback_and_the_helpers_name(echo):
    h = start(echo)
    try:
        with pytest.raises(HelperError) as err:
            h.request(("boom", "the value"))
        message = str(err.value)
        assert message.startswith("the echo process failed: KeyError: 'the value'")
        assert f"In the echo process (pid {h.pid}):" in message
        assert "in explode" in message and "raise KeyError(value)" in message
        assert h.request(("seen", None)) == []  # one failed request; the server goes on
        h.notify(("nope", 1))  # a failed notification fails the next request instead
        with pytest.raises(HelperError, match="ValueError: unknown 'nope'"):
            h.request(("seen", None))
        assert h.request(("seen", None)) == []
    finally:
        h.stop()


def test_a_server_that_fails_to_start_is_a_start_error(echo):
    h = start(echo, fail_at_start=True)
    with pytest.raises(HelperStartError, match="did not start: RuntimeError: no device here"):
        h.request(("seen", None))
    with pytest.raises(HelperStartError):
        h.wait_ready()
    assert h.poll() is not None


def test_a_killed_server_is_an_error_every_time_after(echo):
    h = start(echo)
    h.wait_ready()
    os.kill(h.pid, signal.SIGKILL)
    for _ in range(2):
        with pytest.raises(HelperError, match=r"echo process exited unexpectedly \(exit code -9\)"):
            h.request(("seen", None))
    h.stop()


def test_the_server_imports_only_what_it_needs(echo):
    # -I -S and dlpipe's __init__ not run: no operator registry, numpy, OpenCV or Pillow
    h = start(echo)
    try:
        modules = set(h.request(("modules", None)))
    finally:
        h.stop()
    assert "echo_server" in modules and "dlpipe._ipc.server" in modules
    assert not {"numpy", "cv2", "PIL", "site", "dlpipe.graph", "dlpipe.fn"} & modules
    assert not [m for m in modules if m.startswith(("dlpipe.operators", "dlpipe.readers"))]


def test_helpers_ignore_sigint_and_run_in_a_session_of_their_own(echo):
    h = start(echo)
    try:
        h.wait_ready()
        assert os.getsid(h.pid) == h.pid != os.getsid(0)  # Ctrl-C's group is not theirs
        os.kill(h.pid, signal.SIGINT)
        h.notify(("add", 5))
        assert h.request(("seen", None)) == [5]
    finally:
        h.stop()


def test_the_interpreter_is_found_beside_a_sys_executable_that_is_not_one(monkeypatch, tmp_path):
    real = sys.executable
    monkeypatch.setattr(sys, "executable", "/usr/local/bin/my-app")
    monkeypatch.setattr(sys, "_base_executable", real)
    assert process.python() == real
    monkeypatch.setattr(sys, "_base_executable", "/bin/true")
    for name in ("exec_prefix", "base_exec_prefix"):
        monkeypatch.setattr(sys, name, str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HelperStartError) as err:
        process.python()
    v = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert str(err.value) == (
        "sys.executable='/usr/local/bin/my-app' is not a Python interpreter, and no "
        f"python{v} was found beside it (tried /usr/local/bin/my-app, /bin/true, "
        f"{tmp_path}/bin/python{v})"
    )


def test_an_interpreter_that_is_not_one_after_all_is_a_start_error(monkeypatch, tmp_path):
    # named like a Python, exits at once: the handshake says it did not start
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    h = HelperProcess("read process", "dlpipe.readers._read_server", {"threads": 1, "fd": 0})
    with pytest.raises(HelperStartError, match=r"read process did not start: .*exit code 3"):
        h.wait_ready()


def test_reader_takes_frames_with_few_reads(monkeypatch):
    """Small frames already in the pipe come in one read each (header and body), the next
    frame's bytes wait in the buffer; a frame larger than a chunk comes whole."""
    import os
    import threading

    from dlpipe._ipc import wire

    r, w = os.pipe()
    big = bytes(range(256)) * 1000  # 256 KB: more than a chunk, and than the pipe holds

    wire.write(w, wire.frame("a"))  # all of "a" and the next two lie in the pipe at the first read
    small = wire.frame({"b": 2})
    wire.write(w, small)
    writer = threading.Thread(
        target=lambda: (wire.write(w, wire.frame(big)), wire.write(w, wire.frame("c")), os.close(w))
    )
    try:
        reads, real = [], os.read

        def counting(fd, n):
            reads.append(n)
            return real(fd, n)

        monkeypatch.setattr(os, "read", counting)
        reader = wire.Reader(r)
        assert reader.read() == ("a", 0)
        assert len(reads) == 1  # the first read took "a" and more
        assert reader.read() == ({"b": 2}, 0)
        assert len(reads) == 1  # from the buffer
        writer.start()
        assert reader.read()[0] == big
        assert reader.read() == ("c", 0)
        with pytest.raises(EOFError):
            reader.read()
    finally:
        if writer.ident is not None:
            writer.join()
        os.close(r)
