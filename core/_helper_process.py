"""What the helper processes share (the read process of ``readers.file``, the decode processes
of the mixed decoder): whether one may run here, and how one is stopped."""

from __future__ import annotations

import os
import subprocess
import sys


def allowed(variable: str) -> bool:
    """Whether this platform has what a helper process needs (memfd: Linux), and whether the
    environment ``variable`` allows it (``0`` turns it off)."""
    return hasattr(os, "memfd_create") and os.environ.get(variable, "1") != "0"


def start(name: str, nbytes: int, args: list[str]) -> tuple[subprocess.Popen, int]:
    """A memfd of ``nbytes`` (address space only) and a Python process ``python *args FD``
    sharing it, with pipes on its stdin and stdout. Returns (process, fd)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, nbytes)
        proc = subprocess.Popen(
            [sys.executable, *args, str(fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(fd,),
        )
    except BaseException:
        os.close(fd)
        raise
    return proc, fd


def stop(proc: subprocess.Popen, fd: int) -> None:
    """End ``proc`` by closing its pipes (EOF on its stdin ends it; killed after 10 s), then
    close the memfd ``fd`` it shared."""
    for pipe in (proc.stdin, proc.stdout):
        try:
            pipe.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    os.close(fd)
