"""``fn.io.file.read``: the bytes of the file whose path each sample holds.

DALI's convention (``dali/operators/io/file/file_read.cc``): each input sample is a 1-D uint8
(or int8) tensor holding an encoded path, as ``np.frombuffer(path.encode("utf-8"),
dtype=np.uint8)`` makes it in an ``external_source``; the output is the file's whole contents
as a 1-D uint8 tensor. The path ends at its first NUL byte, as DALI's C string does, so paths
padded with zeros to a common length work too.

A batch's files are read as ``readers.file`` reads them: by its read processes, into shared
memory, in one request (``readers/_read_process.BatchReads``). Read on the stage thread one
after another, each file cost ~125 us there while the decode lanes and the GPU stage ran
Python beside it, and held the PyTorch proxy's pipeline to 17 ms a batch of 128
(BENCHMARKS.md "The proxy's batches in flight").
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from ..errors import ArgumentError, DataNotFoundError
from ..graph import Operator, register
from ._read_process import BatchReads

WHO = "io.file.read"


def decode_path(sample: np.ndarray) -> bytes:
    """The path a sample encodes (bytes, up to the first NUL).

    Raises:
        ArgumentError: the sample is not a 1-D uint8/int8 tensor.
    """
    if sample.dtype not in (np.uint8, np.int8):
        raise ArgumentError(
            f"{WHO}: the input must be uint8 or int8 (an encoded path), got {sample.dtype}"
        )
    if sample.ndim != 1:
        raise ArgumentError(
            f"{WHO}: each input sample must be a 1-D byte array (an encoded path), got shape "
            f"{sample.shape}"
        )
    raw = sample.tobytes()
    end = raw.find(b"\0")
    return raw if end < 0 else raw[:end]


def read_whole_file(path: bytes, use_mmap: bool) -> np.ndarray:
    """The contents of ``path`` as a new 1-D uint8 array, copied out of a read-only mapping
    (``use_mmap``) or read with plain ``read`` calls.

    Raises:
        DataNotFoundError: the file cannot be opened or read; the message names it.
    """
    shown = os.fsdecode(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise DataNotFoundError(f"{WHO}: cannot open {shown!r}: {e.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        out = np.empty(size, dtype=np.uint8)
        if size == 0:
            return out
        if use_mmap:
            try:
                with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as m:
                    out[:] = np.frombuffer(m, dtype=np.uint8)
                return out
            except (OSError, ValueError):  # a file that cannot be mapped (a pipe, procfs)
                pass
        got = 0
        while got < size:
            n = os.preadv(fd, [out[got:]], got)
            if n == 0:
                raise DataNotFoundError(
                    f"{WHO}: expected to read {size} bytes of {shown!r}, but got only {got}"
                )
            got += n
        return out
    except OSError as e:
        raise DataNotFoundError(f"{WHO}: cannot read {shown!r}: {e.strerror}") from None
    finally:
        os.close(fd)


@register
class FileRead(Operator):
    """Reads raw file contents from an encoded path per sample: 1-D uint8/int8 in, the file's
    bytes (1-D uint8) out.

    Args:
        dont_use_mmap: read with plain file I/O instead of through a memory mapping (default
            False; mapping is a little faster on local disks, slower on network file systems).
        use_o_direct: accepted for compatibility (it needs ``dont_use_mmap=True``); reads go
            through the page cache either way.

    Example:
        >>> paths = fn.external_source(
        ...     lambda: [np.frombuffer(p.encode(), dtype=np.uint8) for p in batch_of_paths])
        >>> data = fn.io.file.read(paths)
        >>> images = fn.decoders.image(data)
    """

    schema = "io.file.read"
    ops_name = "Read"
    batch_level = True  # a batch's files in one request to the read processes

    def setup(self, *, dont_use_mmap: bool = False, use_o_direct: bool = False) -> None:
        if use_o_direct and not dont_use_mmap:
            raise ArgumentError(f"{WHO}: use_o_direct=True needs dont_use_mmap=True")
        self.use_mmap = not dont_use_mmap
        self._reads = BatchReads(WHO, self._read_here, _read_error)

    def prepare(self, ctx) -> None:
        self._reads.configure(ctx.runtime)

    def output_layouts(self, input_layouts):
        return [""]

    def _read_here(self, path: str) -> np.ndarray:
        return read_whole_file(os.fsencode(path), self.use_mmap)

    def run_batch_cpu(self, inputs, args, params):
        paths = [os.fsdecode(decode_path(np.asarray(x))) for x in inputs[0]]
        return [self._reads.read(paths)]

    def close(self) -> None:
        self._reads.close()


def _read_error(path: str, e: OSError) -> DataNotFoundError:
    return DataNotFoundError(f"{WHO}: cannot read {path!r}: {e.strerror}")
