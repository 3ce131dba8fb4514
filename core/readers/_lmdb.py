"""LMDB databases read by index, for the Caffe and Caffe2 readers (DALI's ``LMDBLoader``).

The databases given form one dataset: the entries of each, in key order (LMDB keeps keys
sorted), one database after another. DALI walks a cursor to the wanted position; here every
key is listed once when the reader is built (keys only: the values, the images, stay on
disk), so that any sample can be read on any thread by a plain ``get``. Databases open
read-only without the lock file (``MDB_NOLOCK``, as DALI), once per process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError, DataNotFoundError, require_extra
from ._sharding import ShardedLoader, ShardedReader


def import_lmdb():
    """The ``lmdb`` module, or MissingExtraError naming ``pip install "dlpipe[lmdb]"``."""
    return require_extra("lmdb", "lmdb")


class LMDBDatabases:
    """Entries of one or more LMDB databases, addressed by a global index.

    Args:
        paths: LMDB directories (each holding ``data.mdb``).
        who: the reader's name for error messages.
        read_ahead: let the OS read ahead in the memory map (LMDB's ``readahead``).

    Raises:
        DataNotFoundError: a path that is not an LMDB database (the message names it).
        MissingExtraError: the ``lmdb`` package is not installed.
    """

    def __init__(self, paths: Sequence[str], who: str, read_ahead: bool = False):
        self._lmdb = import_lmdb()
        self.paths = [os.fspath(p) for p in paths]
        self.who = who
        self.read_ahead = bool(read_ahead)
        self._envs: list | None = None
        self._pid = -1
        self._lock = threading.Lock()
        blobs, lengths, db_sizes = [], [], []
        for k in range(len(self.paths)):
            with self._env(k).begin(buffers=False) as txn:
                keys = list(txn.cursor().iternext(keys=True, values=False))
            blobs += keys
            lengths += [len(key) for key in keys]
            db_sizes.append(len(keys))
        # Keys, concatenated (a few tens of bytes each; no Python object per entry).
        self._keys = b"".join(blobs)
        self._key_end = np.cumsum(lengths, dtype=np.int64)
        self._db_start = np.concatenate([[0], np.cumsum(db_sizes)]).astype(np.int64)
        self.db_sizes = db_sizes

    def __len__(self) -> int:
        return int(self._db_start[-1])

    def _env(self, k: int):
        envs = self._envs
        if self._pid == os.getpid() and envs is not None and envs[k] is not None:
            return envs[k]
        with self._lock:
            if self._pid != os.getpid():  # first use, or a forked child: open anew
                self._envs = [None] * len(self.paths)
                self._pid = os.getpid()
            if self._envs[k] is None:
                self._envs[k] = _acquire_env(self._lmdb, self.paths[k], self.read_ahead, self.who)
            return self._envs[k]

    def locate(self, index: int) -> tuple[int, bytes]:
        """(database, key) of entry ``index``."""
        db = int(np.searchsorted(self._db_start, index, side="right")) - 1
        start = int(self._key_end[index - 1]) if index else 0
        return db, self._keys[start : int(self._key_end[index])]

    def source_info(self, index: int) -> str:
        """``"<database> at key <key>"``, DALI's source_info of an LMDB sample."""
        db, key = self.locate(index)
        return f"{self.paths[db]} at key {key.decode('utf-8', 'backslashreplace')}"

    def read(self, index: int) -> bytes:
        """The value of entry ``index``.

        Raises:
            DataNotFoundError: the entry vanished (the database changed since it was listed).
        """
        db, key = self.locate(index)
        try:
            with self._env(db).begin(buffers=False) as txn:
                value = txn.get(key)
        except self._lmdb.Error as e:
            raise DataNotFoundError(f"{self.who}: {self.source_info(index)}: {e}") from None
        if value is None:
            raise DataNotFoundError(
                f"{self.who}: {self.source_info(index)}: the entry is gone (was the database "
                "changed after the reader was built?)"
            )
        return value

    def close(self) -> None:
        with self._lock:
            if self._envs is not None and self._pid == os.getpid():
                for path, env in zip(self.paths, self._envs, strict=True):
                    if env is not None:
                        _release_env(path)
            self._envs = None
            self._pid = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# An LMDB environment may be open only once per process (LMDB's rule, which the lmdb package
# enforces): readers of the same database share one, counted, per process.
_SHARED: dict[tuple[int, str], list] = {}  # (pid, real path) -> [environment, users]
_SHARED_LOCK = threading.Lock()


def _acquire_env(lmdb, path: str, read_ahead: bool, who: str):
    """The process's environment of the database ``path`` (opened read-only, no lock file, on
    first use; ``read_ahead`` of the first opener applies)."""
    key = (os.getpid(), os.path.realpath(path))
    with _SHARED_LOCK:
        entry = _SHARED.get(key)
        if entry is None:
            if not os.path.isdir(path):
                raise DataNotFoundError(f"{who}: LMDB directory {path!r} does not exist")
            try:
                env = lmdb.open(
                    path,
                    readonly=True,
                    lock=False,
                    create=False,
                    subdir=True,
                    readahead=read_ahead,
                    max_readers=1024,
                )
            except lmdb.Error as e:
                raise DataNotFoundError(
                    f"{who}: {path!r} is not a readable LMDB database: {e}"
                ) from None
            entry = _SHARED[key] = [env, 0]
        entry[1] += 1
        return entry[0]


def _release_env(path: str) -> None:
    key = (os.getpid(), os.path.realpath(path))
    with _SHARED_LOCK:
        entry = _SHARED.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            entry[0].close()
            del _SHARED[key]


class LMDBReader(ShardedReader):
    """Mixin of the LMDB readers (Caffe, Caffe2): ``self.db`` and ``self.loader`` made by
    :meth:`open_databases` in ``setup``; ``source_info`` and ``close`` from them. List it before
    ``Operator`` among the bases."""

    def open_databases(
        self,
        path,
        who: str,
        *,
        shard_id: int,
        num_shards: int,
        random_shuffle: bool,
        initial_fill: int,
        stick_to_shard: bool,
        pad_last_batch: bool,
        read_ahead: bool,
    ) -> None:
        """List the databases ``path`` (one or several) and shard their entries.

        Raises:
            ArgumentError: no path, or a bad sharding argument.
            DataNotFoundError: a path that is not an LMDB database, or no entries at all.
        """
        paths = [path] if isinstance(path, str | os.PathLike) else list(path or [])
        if not paths:
            raise ArgumentError(f"{who}: path={path!r}: give at least one LMDB directory")
        self.db = LMDBDatabases(paths, who, read_ahead)
        if not len(self.db):
            raise DataNotFoundError(f"{who}: the LMDB databases {self.db.paths!r} are empty")
        self.loader = ShardedLoader(
            len(self.db),
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=random_shuffle,
            initial_fill=initial_fill,
            stick_to_shard=bool(stick_to_shard),
            pad_last_batch=pad_last_batch,
            who=f"{who} {self.name or ''}".strip(),
        )

    def source_info(self, param: int) -> str:
        return self.db.source_info(param)

    def close(self) -> None:
        self.db.close()
