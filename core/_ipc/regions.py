"""Memory that one process shares and another maps for itself: a read process's slots, which a
decode process decodes from without a copy.

A *region* is a mapping of part of a memfd. :func:`share` records it; :func:`locate` finds the
region that a batch's arrays are views of, and their offsets in it; :func:`open_region` maps it
in another process by its ``/proc/PID/fd/FD`` path, checked by inode (a closed fd's number may
name another file by then). :class:`Map` and :class:`Unmap` are the messages a helper that reads
another process's regions (a decode server, a sample server) is sent, and
:class:`MappedRegions` the sending side's record of its answers.
"""

from __future__ import annotations

import itertools
import mmap
import os
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Region:
    """A mapping of ``size`` bytes of a memfd from ``offset``, at address ``start`` here."""

    key: tuple  # unique for good (a path's fd number is used again once closed)
    path: str  # /proc/PID/fd/FD: how another process opens the memfd
    offset: int  # where the mapping starts in the memfd
    start: int  # the mapping's address in this process
    size: int
    inode: int  # the memfd's: what opened by ``path`` must be


_REGIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # mmap -> Region
_KEYS = itertools.count()


def share(memory: mmap.mmap, fd: int, offset: int = 0) -> Region:
    """Let other processes map ``memory`` (a mapping of the memfd ``fd`` from ``offset``) while
    ``fd`` is open; ``unshare`` it before closing ``fd``."""
    first = np.frombuffer(memory, np.uint8, count=1)
    address = first.__array_interface__["data"][0]
    del first  # no buffer export left behind: the mapping may be closed
    pid = os.getpid()
    key, path = (pid, next(_KEYS)), f"/proc/{pid}/fd/{fd}"
    region = _REGIONS[memory] = Region(key, path, offset, address, len(memory), os.fstat(fd).st_ino)
    return region


def unshare(memory: mmap.mmap) -> None:
    _REGIONS.pop(memory, None)


def shared_keys() -> set:
    """The keys of the regions shared now (a region not among them is gone for good)."""
    return {r.key for r in list(_REGIONS.values())}


def open_region(path: str, offset: int, size: int, inode: int) -> mmap.mmap | None:
    """Another process's shared region, mapped in this one (see ``Region``); None when it
    cannot be opened here (no /proc, another user) or ``path`` names another file by now."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_ino != inode or st.st_size < offset + size:
            return None
        return mmap.mmap(fd, size, offset=offset)
    except OSError:
        return None
    finally:
        os.close(fd)


_UNSEEN = object()


def locate(arrays: list) -> tuple[Region, list[int]] | None:
    """The shared region that every one of ``arrays`` (1-D uint8 numpy arrays) is a view of,
    and each one's offset in that region; None when any lies elsewhere (then copy them)."""
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


@dataclass(frozen=True)
class Map:
    """A request to a helper: map the region ``key`` (a ``Region``'s fields), kept until
    :class:`Unmap`. Reply: whether it could (:func:`open_region`)."""

    key: tuple
    path: str
    offset: int
    size: int
    inode: int

    @classmethod
    def of(cls, region: Region) -> Map:
        return cls(region.key, region.path, region.offset, region.size, region.inode)


@dataclass(frozen=True)
class Unmap:
    """A notification to a helper: let go of the region ``key`` (gone where it was shared)."""

    key: tuple


class MappedRegions:
    """Which regions one helper process maps: asked once per region, and the regions gone in
    the process that shared them (a slot a reader dropped, a reader closed) let go of when a
    new one is asked for."""

    def __init__(self) -> None:
        self.answers: dict[tuple, bool] = {}  # region key -> whether the helper maps it

    def maps(self, region: Region, notify: Callable, request: Callable) -> bool:
        """Whether the helper maps ``region``; ``notify(message)`` sends an :class:`Unmap`,
        ``request(message)`` sends the :class:`Map` and returns the helper's answer."""
        ok = self.answers.get(region.key)
        if ok is None:
            live = shared_keys()
            for key in [k for k in self.answers if k not in live]:
                del self.answers[key]
                notify(Unmap(key))
            ok = self.answers[region.key] = request(Map.of(region)) is True
        return ok

    def clear(self) -> None:
        """The helper let go of every region (it went idle, or was started anew)."""
        self.answers.clear()
