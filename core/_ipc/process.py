"""The pipeline's side of a helper process: :class:`HelperProcess`.

One way to start a helper: ``python -I -S dlpipe/_ipc/boot.py``, in a session of its own, with
a pipe on its standard input (messages to it) and one on its standard output (replies), and any
memfds it shares passed by descriptor. The first message names the server module (``Hello``);
its reply (``Ready``) is the handshake, read when the helper is first used, so that several
helpers start at once.

Messages are dataclasses (each server's module defines its own). :meth:`HelperProcess.request`
waits for the reply; :meth:`HelperProcess.notify` does not. A failure in the server is raised
here as :class:`HelperError` with the server's traceback and the helper's name.

Invariants:

* One thread at a time speaks to a helper. Replies come in the order of the requests, and a
  reply means that every message sent before its request has been handled: a client may free
  what the server let go of once any later request has been answered.
* A helper that failed (it exited, it answered garbage, or a ``KeyboardInterrupt`` cut a
  request in half) is not spoken to again: ``failure`` says why and every later request raises
  it (``interrupted`` marks the last case, which an owner may mend by starting another).
* After ``fork()``, a child holds none of its parent's pipes (the at-fork hook points them at
  ``/dev/null``), so the parent's close() is not kept waiting for an end of file that the
  child's copies would hold back; and a helper used in the child raises instead of answering
  the wrong process.
* :meth:`HelperProcess.stop` (also run at interpreter exit, and when the object is collected)
  sends ``Stop``, closes the pipes, waits ``STOP_GRACE`` seconds, then kills.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import weakref

from ..errors import PipelineError
from . import wire
from .messages import Failed, Hello, Ready, Stop

STOP_GRACE = 1.0  # seconds a stopping helper has to exit before it is killed
_BOOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "boot.py")
_PYTHON_NAME = re.compile(r"(python|pypy)[0-9.]*[a-z]*(\.exe)?")


class HelperError(PipelineError):
    """A helper process failed, or can no longer be used."""


class HelperStartError(HelperError):
    """A helper process could not be started here (no memfd, no Python interpreter, it failed
    to start): its owner does the work in the pipeline's process instead."""


def supported() -> bool:
    """Whether this platform has what a helper needs (memfd: Linux). Whether a pipeline uses
    helpers is its ``RuntimeOptions``' choice (``dlpipe.options``)."""
    return hasattr(os, "memfd_create")


_PYTHONS: dict[tuple, tuple[str, str]] = {}


def python() -> str:
    """The Python interpreter that runs helpers: ``sys.executable`` when it is one, else one
    beside it (``sys._base_executable``, ``<exec_prefix>/bin/pythonX.Y``, ``pythonX.Y`` on the
    PATH). Embedded interpreters and frozen applications have an application there instead.

    Raises:
        HelperStartError: none was found; the message says what was tried.
    """
    base = getattr(sys, "_base_executable", "")
    key = (sys.executable, base, sys.exec_prefix, sys.base_exec_prefix, os.environ.get("PATH"))
    if key not in _PYTHONS:
        _PYTHONS[key] = _find_python(base)
    found, why = _PYTHONS[key]
    if not found:
        raise HelperStartError(why)
    return found


def _find_python(base: str) -> tuple[str, str]:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [] if getattr(sys, "frozen", False) else [sys.executable]
    candidates.append(base)
    for prefix in (sys.exec_prefix, sys.base_exec_prefix):
        candidates += [os.path.join(prefix, "bin", f"python{version}")]
    candidates.append(shutil.which(f"python{version}") or "")
    tried = [c for c in dict.fromkeys(candidates) if c]
    for path in tried:
        name = os.path.basename(path)
        if _PYTHON_NAME.fullmatch(name) and os.path.isfile(path) and os.access(path, os.X_OK):
            return path, ""
    return "", (
        f"sys.executable={sys.executable!r} is not a Python interpreter, and no "
        f"python{version} was found beside it (tried {', '.join(tried)})"
    )


PIPE_BYTES = 1 << 20  # Linux's default limit for a pipe's buffer without privileges


def _widen(fd: int) -> None:
    """Give the pipe of ``fd`` a 1 MiB buffer (64 KiB by default), where the system lets us:
    a large frame then moves in a few reads, each a GIL hand-over on the reading side."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


_PIPES: set[int] = set()  # the pipe ends of every running helper, which a forked child drops


def _after_fork_in_child() -> None:
    """Point a forked child's copies of every helper's pipes at /dev/null (the same descriptor
    numbers: whatever closes them later closes nothing else by mistake)."""
    if not _PIPES:
        return
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        for fd in list(_PIPES):
            try:
                os.dup2(null, fd, inheritable=False)
            except OSError:
                pass
    finally:
        os.close(null)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class HelperProcess:
    """A helper process running ``module``'s server (see the module doc).

    Args:
        name: what errors call it ("read process", "decode process").
        module: the server module, by its dlpipe name (``dlpipe.readers._read_server``); its
            ``handler(**args)`` makes the function that handles each message.
        args: keyword arguments of ``handler`` (builtins only: it is sent before the
            server has imported anything).
        path: whether the server needs this process's module search path (numpy, CuPy, ...);
            without it, the standard library only.
        pass_fds: descriptors the server inherits (memfds it maps).
        env: environment variables the server gets besides this process's (those set here
            already win: they are the user's).

    Raises:
        HelperStartError: no Python interpreter here, or the process could not be made.
    """

    def __init__(
        self,
        name: str,
        module: str,
        args: dict | None = None,
        *,
        path: bool = False,
        pass_fds: tuple[int, ...] = (),
        env: dict[str, str] | None = None,
    ):
        self.name = name
        self.executable = python()
        self.owner = os.getpid()
        self.failure = ""  # why it can no longer be used; "" while it can
        self.interrupted = False  # the failure was a request cut in half in this process
        to_server, self._w = os.pipe()
        self._r, from_server = os.pipe()
        _widen(self._w)
        _widen(self._r)
        self._reader = wire.Reader(self._r)
        try:
            self._proc = subprocess.Popen(
                [self.executable, "-I", "-S", _BOOT],
                stdin=to_server,
                stdout=from_server,
                pass_fds=pass_fds,
                start_new_session=True,  # a terminal's Ctrl-C is not sent to it
                env={**env, **os.environ} if env else None,
            )
        except OSError as e:
            os.close(self._w)
            os.close(self._r)
            raise HelperStartError(f"cannot start {self.executable!r}: {e}") from None
        finally:
            os.close(to_server)
            os.close(from_server)
        self.pid = self._proc.pid
        self._fds = (self._w, self._r)
        self._ready: bool | None = None  # the handshake not read yet
        _PIPES.update(self._fds)
        self._stop = weakref.finalize(self, _stop, [(self._proc, self._fds, self.owner)])
        hello = Hello(module, dict(args or {}), tuple(sys.path) if path else ())
        try:
            self._send(hello, wire.REPLY)
        except HelperError:  # exited at once (not a Python after all?): wait_ready says so
            pass

    # --- talking -------------------------------------------------------------------------
    def wait_ready(self) -> None:
        """Read the handshake (once). Raises HelperStartError when the server did not start."""
        if self._ready:
            return
        if self._ready is False:
            raise HelperStartError(self.failure)
        if self.failure:  # the Hello could not even be sent
            self._ready = False
            self.failure = f"the {self.name} did not start: {self.failure}"
            self.stop()
            raise HelperStartError(self.failure)
        try:
            reply = self._receive()
        except HelperError as e:
            self._ready = False
            self.failure = f"the {self.name} did not start: {e}"
            self.stop()
            raise HelperStartError(self.failure) from None
        if isinstance(reply, Failed) or not isinstance(reply, Ready):
            self.failure = f"the {self.name} did not start: {self._describe(reply)}"
        elif reply.cache_tag != sys.implementation.cache_tag:
            self.failure = (
                f"the {self.name} did not start: {self.executable} is "
                f"{reply.cache_tag}, this process {sys.implementation.cache_tag}"
            )
        self._ready = not self.failure
        if self.failure:
            self.stop()
            raise HelperStartError(self.failure)

    def request(self, message: object) -> object:
        """Send ``message`` and return the server's reply.

        Raises:
            HelperError: the server raised (with its traceback), exited, or failed earlier.
        """
        self.submit(message)
        return self.result()

    def submit(self, message: object) -> None:
        """The first half of :meth:`request`: send, and read the reply later with
        :meth:`result` (so that several helpers work at once). Replies come in order."""
        self.wait_ready()
        self._send(message, wire.REPLY)

    def result(self) -> object:
        """The reply to the oldest request submitted and not yet answered."""
        reply = self._receive()
        if isinstance(reply, Failed):
            raise HelperError(f"the {self.name} failed: {self._describe(reply)}")
        return reply

    def notify(self, message: object) -> None:
        """Send ``message``; no reply. Should the server fail on it, the next request raises
        that failure."""
        self._send(message, 0)

    def _check(self) -> None:
        if os.getpid() != self.owner:
            raise HelperError(
                f"the {self.name} (pid {self.pid}) belongs to process {self.owner}; "
                f"this is its forked child {os.getpid()}"
            )
        if self.failure:
            raise HelperError(self.failure)

    def _send(self, message: object, flags: int) -> None:
        self._check()
        data = wire.frame(message, flags)
        try:
            wire.write(self._w, data)
        except OSError:  # EPIPE: it is gone
            self._gone()
        except BaseException as e:
            self._interrupted(e)
            raise

    def _receive(self) -> object:
        self._check()
        try:
            reply, _ = self._reader.read()
            return reply
        except Exception:  # EOF, a read error, or not a frame: it is gone, or cannot be trusted
            self._gone()
        except BaseException as e:
            self._interrupted(e)
            raise

    def _gone(self):
        try:
            code = self._proc.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            code = None
        self.failure = f"the {self.name} exited unexpectedly (exit code {code})"
        raise HelperError(self.failure) from None

    def _interrupted(self, exc: BaseException) -> None:
        # the frames on the pipes may be cut in half: nothing it says can be trusted
        self.interrupted = True
        self.failure = f"a request to the {self.name} was interrupted ({type(exc).__name__})"

    def _describe(self, reply: object) -> str:
        if isinstance(reply, Failed):
            return (
                f"{reply.error}: {reply.message}\n\n"
                f"In the {self.name} (pid {self.pid}):\n{reply.traceback.rstrip()}"
            )
        return f"unexpected reply {reply!r}"

    # --- stopping ------------------------------------------------------------------------
    def stop(self) -> None:
        """End the process (see the module doc); idempotent."""
        self._stop()

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        return self._proc.poll()


def stop_all(helpers: list[HelperProcess]) -> None:
    """Stop several helpers, with one grace period for all."""
    entries = []
    for h in helpers:
        if h._stop.detach() is not None:
            entries.append((h._proc, h._fds, h.owner))
    _stop(entries)


def _stop(entries: list[tuple[subprocess.Popen, tuple[int, int], int]]) -> None:
    for _, (w, r), owner in entries:
        if os.getpid() == owner:
            try:  # an explicit stop: the pipe's end may be held back by a forked child
                os.set_blocking(w, False)
                wire.write(w, wire.frame(Stop()))
            except OSError:
                pass
        for fd in (w, r):
            _PIPES.discard(fd)
            try:
                os.close(fd)
            except OSError:
                pass
    deadline = time.monotonic() + STOP_GRACE
    for proc, _, owner in entries:
        if os.getpid() != owner:
            continue  # a forked child: the process is its parent's to stop
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
