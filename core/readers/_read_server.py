"""The read process behind ``readers.file``: it reads the files of a batch into shared memory.

Started by ``_read_process.ReadProcess`` as ``python -I -S _read_server.py THREADS FD``, so it
imports only the standard library and starts in about 15 ms. ``FD`` is a memfd that the
pipeline's process and every server map.
Requests arrive on stdin and replies leave on stdout, as pickles:

* ``(offset, limit, paths)`` -> ``("ok", offsets, sizes)``: where each file landed. The paths
  are cut into ``THREADS`` runs of files, read by as many threads at once, each run into its
  own share of the ``limit`` bytes from ``offset`` (page-cache reads are bound by system calls
  and copies; a disk wants several reads in flight).
* ``("big",)``: a run needs more than its share (the caller reads the batch itself).
* ``("error", index, errno, strerror)``: ``paths[index]`` could not be opened or read.

EOF on stdin, or a closed reply pipe (the pipeline closed, or its process died), ends the
process.
"""

from __future__ import annotations

import errno
import mmap
import os
import pickle
import stat
import sys
from concurrent.futures import ThreadPoolExecutor


def read_run(view: memoryview, start: int, end: int, paths: list[str], first: int) -> tuple:
    """Read ``paths`` one after another into ``view[start:end]``; ``first`` is the index of
    ``paths[0]`` in the batch (for errors)."""
    offsets, sizes = [], []
    pos = start
    for i, path in enumerate(paths, first):
        try:  # O_NONBLOCK: a FIFO does not wait for a writer (refused below)
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            return ("error", i, e.errno, e.strerror)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # FIFO, device, directory: refused by name
                return (
                    "error",
                    i,
                    errno.EINVAL,
                    "not a regular file (a FIFO, device or directory)",
                )
            size = st.st_size
            if pos + size > end:
                return ("big",)
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
        offsets.append(pos)
        sizes.append(got)
        pos += got
    return ("ok", offsets, sizes)


def read_batch(
    pool, threads: int, view: memoryview, offset: int, limit: int, paths: list[str]
) -> tuple:
    share = limit // threads
    step = -(-len(paths) // threads) or 1
    runs = [
        (view, offset + k * share, offset + (k + 1) * share, paths[j : j + step], j)
        for k, j in enumerate(range(0, len(paths), step))
    ]
    results = (
        [read_run(*run) for run in runs]
        if pool is None
        else list(pool.map(lambda run: read_run(*run), runs))
    )
    for r in results:  # the first failure in batch order
        if r[0] != "ok":
            return r
    return ("ok", [o for r in results for o in r[1]], [s for r in results for s in r[2]])


def serve(threads: int, fd: int) -> None:
    size = os.fstat(fd).st_size
    view = memoryview(mmap.mmap(fd, size))
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    # one reading thread (the default): this one, with no hand-off to a pool per batch
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    while True:
        try:
            offset, limit, paths = pickle.load(requests)
        except EOFError:
            return
        try:
            pickle.dump(read_batch(pool, threads, view, offset, limit, paths), replies)
            replies.flush()
        except BrokenPipeError:  # the pipeline stopped listening: end quietly
            os._exit(0)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
