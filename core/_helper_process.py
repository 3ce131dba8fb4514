"""What the helper processes share (the read process of ``readers.file``, the decode processes
of the mixed decoder): whether one may run here, and how one is stopped."""

from __future__ import annotations

import os
import subprocess


def allowed(variable: str) -> bool:
    """Whether this platform has what a helper process needs (memfd: Linux), and whether the
    environment ``variable`` allows it (``0`` turns it off)."""
    return hasattr(os, "memfd_create") and os.environ.get(variable, "1") != "0"


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
