"""The read process behind ``readers.file``: it reads the files of a batch into shared memory.

Started by ``_read_process.ReadProcess`` as ``python -I -S _read_server.py FD``, so it imports
only the standard library and starts in about 15 ms. ``FD`` is a memfd that both processes map.
Requests arrive on stdin and replies leave on stdout, as pickles:

* ``(offset, limit, paths)`` -> ``("ok", sizes)``: the files, one after another from ``offset``.
* ``("big", needed)``: they need more than ``limit`` bytes (the caller reads them itself).
* ``("error", index, errno, strerror)``: ``paths[index]`` could not be opened or read.

EOF on stdin (the pipeline closed, or its process died) ends the process.
"""

from __future__ import annotations

import mmap
import os
import pickle
import sys


def read_batch(view: memoryview, offset: int, limit: int, paths: list[str]) -> tuple:
    sizes = []
    pos = offset
    end = offset + limit
    for i, path in enumerate(paths):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            return ("error", i, e.errno, e.strerror)
        try:
            size = os.fstat(fd).st_size
            if pos + size > end:
                return ("big", pos + size - offset)
            got = 0
            while got < size:  # short reads (signals, special files): read the rest
                more = os.readv(fd, [view[pos + got : pos + size]])
                if more == 0:  # the file shrank since fstat
                    break
                got += more
        except OSError as e:
            return ("error", i, e.errno, e.strerror)
        finally:
            os.close(fd)
        sizes.append(got)
        pos += got
    return ("ok", sizes)


def serve(fd: int) -> None:
    size = os.fstat(fd).st_size
    view = memoryview(mmap.mmap(fd, size))
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            offset, limit, paths = pickle.load(requests)
        except EOFError:
            return
        pickle.dump(read_batch(view, offset, limit, paths), replies, protocol=5)
        replies.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
