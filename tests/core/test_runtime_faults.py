"""Faults of the runtime layer (helper processes, shared memory), each found by using dlpipe as
a new user would: Ctrl-C, a forked child alive at close(), an embedded interpreter, a pipeline
used in a forked child, a virtual-memory limit. Each runs a child script, so signals, fork,
``sys.executable`` and rlimits stay out of the test process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dlpipe._ipc import process

pytestmark = pytest.mark.skipif(not process.supported(), reason="needs memfd (Linux)")

# What every child script starts with: 24 files whose bytes are their index, a reader pipeline
# over them (the read processes are on by default), and a check of the ids of a batch.
HEAD = """
import os, sys, time, warnings
import numpy as np
from dlpipe import Pipeline, fn

root = sys.argv[1]
os.makedirs(os.path.join(root, "c"), exist_ok=True)
for i in range(24):
    with open(os.path.join(root, "c", f"{i:03d}.jpg"), "wb") as f:
        f.write(np.int32(i).tobytes())

def make(batch=4, **kw):
    pipe = Pipeline(batch_size=batch, num_threads=1, device_id=None, seed=1, **kw)
    with pipe:
        data, labels = fn.readers.file(file_root=root, name="Reader")
        pipe.set_outputs(data, labels)
    return pipe

def ids(out):
    return [int(np.frombuffer(out[0].at(i).tobytes(), np.int32)[0]) for i in range(len(out[0]))]

def zombies():
    # children of this process that exited and were never waited for
    out = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError):
            continue
        if state == "Z" and ppid == str(os.getpid()):
            out.append(p)
    return out

def check_epoch(pipe, batch=4):
    # every batch of an epoch, in order: file i is sample i
    got = []
    for _ in range(24 // batch):
        got += ids(pipe.run())
    assert got == list(range(24)), got
"""


def run_child(tmp_path, body: str, timeout: float = 60, **popen) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(HEAD + textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=timeout,
        **popen,
    )


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def test_ctrl_c_reaches_the_script_and_the_pipeline_goes_on(tmp_path):
    # A terminal's Ctrl-C: SIGINT to the whole process group. The script catches the
    # KeyboardInterrupt (to save a checkpoint, say) and goes on with the same pipeline.
    body = """
    pipe = make()
    check_epoch(pipe)
    pipe.reset()
    print("ready", flush=True)
    try:
        time.sleep(30)  # the SIGINT arrives here
        raise SystemExit("no KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    for _ in range(3):
        check_epoch(pipe)
        pipe.reset()
    print("ok", flush=True)
    """
    script = tmp_path / "child.py"
    script.write_text(HEAD + textwrap.dedent(body))
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell gives a job
    )
    try:
        assert child.stdout.readline() == "ready\n"
        helpers = _children(child.pid)
        assert helpers, "the read processes should be running"
        os.killpg(child.pid, signal.SIGINT)
        for pid in helpers:  # wherever they are, helpers ignore SIGINT
            try:
                os.kill(pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert out == "ok\n"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


@pytest.mark.parametrize("how", ["os.fork", "libc fork"])
def test_close_returns_at_once_while_a_forked_child_lives(tmp_path, how):
    # A torch DataLoader with persistent workers, a fork pool: a child forked after the
    # helpers started holds copies of everything the parent had open. ``libc fork`` forks
    # without Python's at-fork hooks (as C code does).
    fork = "os.fork()" if how == "os.fork" else "__import__('ctypes').CDLL(None).fork()"
    body = f"""
    pipe = make()
    check_epoch(pipe)
    pid = {fork}
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    start = time.monotonic()
    pipe.close()
    took = time.monotonic() - start
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print(f"{{took:.3f}}", flush=True)
    """
    start = time.monotonic()
    got = run_child(tmp_path, body)
    assert got.returncode == 0, got.stderr
    assert float(got.stdout) < 5  # it was 40 s: 4 processes x 10 s waiting for an EOF
    assert time.monotonic() - start < 30  # interpreter exit did not wait either


def test_a_python_is_found_when_sys_executable_is_not_one(tmp_path):
    # Embedded Python, frozen apps: sys.executable names the application, not an interpreter.
    body = """
    real = sys.executable
    sys.executable = "/bin/true"
    pipe = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an interpreter is found: nothing to warn about
        check_epoch(pipe)
    helpers = pipe._readers["Reader"]._reads.process.helpers
    assert helpers and all(h.executable != "/bin/true" for h in helpers)
    print("ok")
    """
    got = run_child(tmp_path, body)
    assert got.returncode == 0, got.stderr
    assert got.stdout == "ok\n"


def test_without_an_interpreter_files_are_read_here_with_one_warning(tmp_path):
    body = """
    sys.executable = sys._base_executable = "/bin/true"
    sys.exec_prefix = sys.base_exec_prefix = sys.prefix = sys.base_prefix = root
    os.environ["PATH"] = root
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):  # three pipelines, one warning
            pipe = make()
            check_epoch(pipe)
            pipe.close()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    print(messages[0])
    """
    got = run_child(tmp_path, body)
    assert got.returncode == 0, got.stderr
    assert "sys.executable='/bin/true' is not a Python interpreter" in got.stdout
    assert "in the pipeline's process" in got.stdout


def test_a_pipeline_used_in_a_forked_child_is_an_error_not_a_hang(tmp_path):
    body = """
    import faulthandler
    pipe = make()
    check_epoch(pipe)
    spare = make()  # defined, not built: the child may build and use it
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        faulthandler.dump_traceback_later(20, exit=True)  # a hang fails the test
        try:
            pipe.run()
            msg = "no error"
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
        try:
            check_epoch(spare)
            msg += "|spare ok"
        except Exception as e:
            msg += f"|spare {type(e).__name__}: {e}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        print(f.read())
    os.waitpid(pid, 0)
    pipe.reset()
    check_epoch(pipe)  # the parent's pipeline is untouched
    """
    got = run_child(tmp_path, body)
    assert got.returncode == 0, got.stderr
    first, spare = got.stdout.strip().split("|")
    assert first.startswith("PipelineError: ")
    assert "forked" in first and "build the pipeline in the child" in first.lower()
    assert spare == "spare ok"


def _open_fds() -> str:
    return "len(os.listdir('/proc/self/fd'))"


def test_readers_under_a_virtual_memory_limit(tmp_path):
    # ``ulimit -v``, common on clusters: address space is what is limited, and each reader
    # once reserved 128 GiB of it. Many builds read correctly and leave no fd or process.
    body = f"""
    import resource
    limit = 6 << 30  # far below what the old slots reserved; far above what is used
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    pipe = make()
    check_epoch(pipe)
    assert pipe._readers["Reader"]._reads.process is not None  # read processes, not a fallback
    pipe.close()
    fds = {_open_fds()}
    for _ in range(8):
        pipe = make()
        check_epoch(pipe)
        pipe.close()
    del pipe
    import gc
    gc.collect()
    assert {_open_fds()} == fds, ({_open_fds()}, fds)
    assert not zombies(), zombies()
    print("ok")
    """
    got = run_child(tmp_path, body, timeout=120)
    assert got.returncode == 0, got.stderr
    assert got.stdout == "ok\n"
    assert "Traceback" not in got.stderr
