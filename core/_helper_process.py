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
        return spawn(args, fd), fd
    except BaseException:
        os.close(fd)
        raise


def spawn(args: list[str], fd: int) -> subprocess.Popen:
    """A Python process ``python *args FD`` that shares the memfd ``fd``, with pipes on its
    stdin and stdout (several processes may share one memfd)."""
    return subprocess.Popen(
        [sys.executable, *args, str(fd)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        pass_fds=(fd,),
    )


def stop(proc: subprocess.Popen | list[subprocess.Popen], fd: int) -> None:
    """End ``proc`` (or each of a list) by closing its pipes (EOF on its stdin ends it; killed
    after 10 s), then close the memfd ``fd`` it shared."""
    procs = proc if isinstance(proc, list) else [proc]
    for p in procs:
        for pipe in (p.stdin, p.stdout):
            try:
                pipe.close()
            except OSError:
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    os.close(fd)
