"""``cupy.cuda`` of the fake CuPy: devices, streams and events that only count."""

from __future__ import annotations

from .. import COUNTS, _Device, _Pointer
from . import runtime  # noqa: F401


class Device(_Device):
    pass


class Stream:
    null: Stream

    def __init__(self, non_blocking=False, null=False, ptr=1):
        self.ptr = ptr
        self.cuda_stream = ptr

    def __enter__(self):
        _CURRENT.append(self)
        return self

    def __exit__(self, *exc):
        _CURRENT.pop()
        return False

    def wait_event(self, event) -> None:
        COUNTS["wait_event"] += 1

    def synchronize(self) -> None:
        COUNTS["sync"] += 1

    def record(self, event=None):
        event = event or Event()
        event.record(self)
        return event


Stream.null = Stream(ptr=0)
ExternalStream = Stream
_CURRENT = [Stream.null]


def get_current_stream() -> Stream:
    return _CURRENT[-1]


class Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.ptr = 7

    def record(self, stream=None) -> None:
        COUNTS["event_record"] += 1

    def synchronize(self) -> None:
        pass

    def done(self) -> bool:
        return True

    def query(self) -> bool:
        return True


class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id=0):
        self.ptr = ptr


class MemoryPointer(_Pointer):
    def __init__(self, mem, offset):
        super().__init__(mem.ptr + offset, mem)


def alloc(nbytes: int) -> _Pointer:
    """Device memory of ``nbytes`` from the pool: counted as an allocation, as ``empty``."""
    from .. import _ADDRESSES

    COUNTS["empty"] += 1
    return _Pointer(next(_ADDRESSES))


class memory:
    Memory = object


class cufft:  # noqa: N801 (a module in CuPy)
    CUFFT_R2C = 0x2A
    CUFFT_FORWARD = -1

    class Plan1d:
        def __init__(self, nx, fft_type, batch):
            self.nx, self.batch = nx, batch

        def fft(self, a, out, direction):
            COUNTS["launch"] += 1
            COUNTS["launch:cufft_r2c"] += 1


class curand:  # noqa: N801 (a module in CuPy)
    CURAND_RNG_PSEUDO_PHILOX4_32_10 = 24

    @staticmethod
    def generateNormal(generator, ptr, n, mean, stddev) -> None:  # noqa: N802 (CuPy's name)
        if n % 2:
            raise ValueError("cuRAND draws normal numbers in even counts")
        COUNTS["launch"] += 1
        COUNTS["launch:curand_normal"] += 1

    generateNormalDouble = generateNormal  # noqa: N815
