"""What the helper processes share (the read processes of ``readers.file``, the decode processes
of the mixed decoder): whether one may run here, how one is started and stopped, and where a
batch's bytes lie in shared memory that another helper may map for itself (``Region``)."""

from __future__ import annotations

import itertools
import mmap
import os
import subprocess
import sys
import weakref
from dataclasses import dataclass

import numpy as np


def supported() -> bool:
    """Whether this platform has what a helper process needs (memfd: Linux). Whether a pipeline
    uses them is its ``RuntimeOptions``' choice (``dlpipe.options``)."""
    return hasattr(os, "memfd_create")


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


@dataclass(frozen=True)
class Region:
    """A memfd mapped in this process that other processes of this user may map too: a read
    process's slots, which a decode process then decodes from without a copy."""

    key: tuple  # unique for good (a path's fd number is used again once closed)
    path: str  # /proc/PID/fd/FD: how another process opens the memfd
    start: int  # the mapping's address in this process
    size: int
    inode: int  # the memfd's: what opened by ``path`` must be


_REGIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # mmap -> Region
_KEYS = itertools.count()


def share(memory: mmap.mmap, fd: int) -> None:
    """Let other helpers map ``memory`` (a mapping of the memfd ``fd``) while ``fd`` is open;
    ``unshare`` it before closing ``fd``."""
    first = np.frombuffer(memory, np.uint8, count=1)
    address = first.__array_interface__["data"][0]
    del first  # no buffer export left behind: the mapping may be closed
    pid = os.getpid()
    key, path = (pid, next(_KEYS)), f"/proc/{pid}/fd/{fd}"
    _REGIONS[memory] = Region(key, path, address, len(memory), os.fstat(fd).st_ino)


def unshare(memory: mmap.mmap) -> None:
    _REGIONS.pop(memory, None)


def open_region(path: str, size: int, inode: int) -> mmap.mmap | None:
    """Another process's shared region, mapped in this one (see ``Region``); None when it
    cannot be opened here (no /proc, another user) or ``path`` names another file by now."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_ino != inode or st.st_size < size:
            return None
        return mmap.mmap(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


_UNSEEN = object()


def locate(arrays: list) -> tuple[Region, list[int]] | None:
    """The shared region that every one of ``arrays`` (1-D uint8 numpy arrays) is a view of,
    and each one's offset in it; None when any lies elsewhere (then copy them)."""
    region = None
    offsets = []
    seen: object = _UNSEEN  # the last base looked up: a batch's samples share one
    for a in arrays:
        if a.base is not seen:
            owner = seen = a.base  # a read slot's views: of a batch array, of a memoryview
            while isinstance(owner, np.ndarray):
                owner = owner.base
            if isinstance(owner, memoryview):
                owner = owner.obj
            r = _REGIONS.get(owner) if isinstance(owner, mmap.mmap) else None
            if r is None or (region is not None and r is not region):
                return None
            region = r
        if not a.flags.c_contiguous:
            return None
        offsets.append(a.__array_interface__["data"][0] - region.start)
    return (region, offsets) if region is not None else None
