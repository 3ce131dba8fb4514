"""``cupy.cuda.runtime`` of the fake CuPy."""

from __future__ import annotations

from .. import COUNTS

memcpyHostToDevice = 1
memcpyDefault = 4


def getDeviceCount() -> int:
    return 1


def getDevice() -> int:
    return 0


def streamWaitEvent(stream, event, flags=0) -> None:
    COUNTS["wait_event"] += 1


def memcpyAsync(dst, src, size, kind, stream) -> None:
    COUNTS["h2d" if kind == memcpyHostToDevice else "memcpy"] += 1


def streamSynchronize(stream) -> None:
    COUNTS["sync"] += 1


def deviceSynchronize() -> None:
    COUNTS["sync"] += 1


def hostRegister(ptr, size, flags) -> None:
    COUNTS["host_register"] += 1


def hostUnregister(ptr) -> None:
    COUNTS["host_unregister"] += 1
