"""How messages travel between the pipeline's process and a helper: frames on a pipe.

A frame is an 8-byte little-endian length, a flags byte and that many bytes of a pickle
(protocol 5). The only flag, ``REPLY``, says that the sender waits for an answer (a request)
rather than not (a notification). Plain ``os.read``/``os.write`` on the pipe's descriptors:
no Python file buffering between the two sides, so a process that forked knows exactly what
it holds (the descriptors), and a reply is never stuck in a buffer.
"""

from __future__ import annotations

import os
import pickle
import struct

_HEADER = struct.Struct("<QB")
REPLY = 1  # the sender waits for a reply


def frame(message: object, flags: int = 0) -> bytes:
    """``message`` as one frame."""
    body = pickle.dumps(message, protocol=5)
    return _HEADER.pack(len(body), flags) + body


def write(fd: int, data: bytes) -> None:
    """All of ``data`` to the pipe ``fd`` (a pipe may take a large frame in several writes)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, n: int) -> bytes | bytearray:
    first = os.read(fd, n)
    if len(first) == n:
        return first
    if not first:
        raise EOFError("the other process closed the pipe")
    buf = bytearray(n)  # the rest straight into one buffer: no parts to join
    buf[: len(first)] = first
    view, got = memoryview(buf), len(first)
    while got < n:
        more = os.readv(fd, [view[got:]])
        if not more:
            raise EOFError("the other process closed the pipe")
        got += more
    return buf


class Reader:
    """The frames of one pipe, read with as few system calls as the pipe allows: each read
    takes what is there (up to ``CHUNK``), so a small frame is one read, header and body, and
    what belongs to the next frame waits in the buffer. Every read lets the GIL go and takes it
    back, which costs a thread up to a switch interval while others run Python. One reader
    per pipe, for as long as the pipe is read."""

    CHUNK = 1 << 16

    def __init__(self, fd: int):
        self.fd = fd
        self._buf = b""

    def read(self) -> tuple[object, int]:
        """The next frame: (message, flags). Raises EOFError at the end of the pipe."""
        buf = self._buf
        while len(buf) < _HEADER.size:
            more = os.read(self.fd, self.CHUNK)
            if not more:
                raise EOFError("the other process closed the pipe")
            buf += more
        size, flags = _HEADER.unpack_from(buf)
        end = _HEADER.size + size
        while len(buf) < end and len(buf) < self.CHUNK:
            more = os.read(self.fd, self.CHUNK)
            if not more:
                raise EOFError("the other process closed the pipe")
            buf += more
        if len(buf) >= end:
            self._buf = buf[end:]
            return pickle.loads(memoryview(buf)[_HEADER.size : end]), flags
        self._buf = b""  # a large frame: the rest straight into one buffer
        head = buf[_HEADER.size :]
        rest = _read_exactly(self.fd, size - len(head))
        return pickle.loads(head + rest), flags
