"""``fn.readers.file``: raw file bytes and integer labels from a directory tree, a list file or a
list of paths, sharded and shuffled as DALI's file reader does."""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import stat
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._argcheck import is_int
from ..errors import ArgumentError, DataNotFoundError
from ..graph import Operator, register
from . import _read_process
from ._sharding import ListSharding, ShardedReader

# DALI's default ``file_filters`` (known image and audio extensions).
KNOWN_EXTENSIONS = (
    "*.jpg",
    "*.jpeg",
    "*.png",
    "*.bmp",
    "*.gif",
    "*.tif",
    "*.tiff",
    "*.pnm",
    "*.ppm",
    "*.pgm",
    "*.pbm",
    "*.jp2",
    "*.webp",
    "*.flac",
    "*.ogg",
    "*.wav",
)

_LIST_LINE = re.compile(r"^(.*?)\s+(\d+)$")


def _match(name: str, patterns: Sequence[str], case_sensitive: bool) -> bool:
    if case_sensitive:
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)
    low = name.lower()
    return any(fnmatch.fnmatchcase(low, p.lower()) for p in patterns)


_LABEL_MAX = 2**31 - 1  # labels are int32, as in DALI


def _special_kind(mode: int) -> str | None:
    """What a non-regular, non-directory file is ("a FIFO", ...), None for a regular file."""
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a regular file"


def list_file_root(
    root: str, file_filters: Sequence[str], dir_filters: Sequence[str] | None, case_sensitive: bool
) -> tuple[list[str], list[int]]:
    """The ``file_root`` listing: immediate subdirectories (sorted) are the classes.

    Regular files and symbolic links matching ``file_filters`` are listed; directories are
    passed over (as DALI does). A FIFO, device or socket matching the filters is refused by
    name: reading one would hang or give endless bytes. Told apart by the directory entry's
    type, so the listing costs no ``stat`` per file (a symbolic link is checked when read).

    Raises:
        DataNotFoundError: ``root`` is not a directory.
        ArgumentError: a special file matches the filters.
    """
    if not os.path.isdir(root):
        raise DataNotFoundError(f"readers.file: file_root={root!r} is not a directory")
    with os.scandir(root) as it:
        subdirs = sorted(e.name for e in it if e.is_dir())
    if dir_filters:
        subdirs = [d for d in subdirs if _match(d, dir_filters, case_sensitive)]
    files: list[str] = []
    labels: list[int] = []
    for label, sub in enumerate(subdirs):
        names = []
        with os.scandir(os.path.join(root, sub)) as it:
            for e in it:
                if not _match(e.name, file_filters, case_sensitive):
                    continue
                if e.is_file(follow_symlinks=False) or e.is_symlink():
                    names.append(e.name)
                elif not e.is_dir(follow_symlinks=False):
                    kind = _special_kind(e.stat(follow_symlinks=False).st_mode)
                    raise ArgumentError(
                        f"readers.file: {os.path.join(root, sub, e.name)!r} in file_root is "
                        f"{kind}, not a file: remove it or change file_filters"
                    )
        names.sort()
        files += [f"{sub}/{n}" for n in names]
        labels += [label] * len(names)
    return files, labels


def _label(text: str, where: str) -> int:
    """A list's label: a non-negative integer that fits int32."""
    value = int(text)
    if value > _LABEL_MAX:
        raise ArgumentError(f"readers.file: {where}: label {value} does not fit int32")
    return value


def parse_file_list(path: str) -> tuple[list[str], list[int]]:
    """A ``file_list``: one ``name label`` per line, parsed from the right (names may hold
    spaces); blank lines are passed over.

    Raises:
        DataNotFoundError: ``path`` is missing or not a regular file.
        ArgumentError: a line that is not UTF-8 or not ``name label`` (a non-negative int32
            label), or a list with no entries; each names the list file and the line.
    """
    if not os.path.exists(path):
        raise DataNotFoundError(f"readers.file: file_list={path!r} does not exist")
    if not os.path.isfile(path):  # a FIFO would hang open()
        kind = _special_kind(os.stat(path).st_mode)
        raise DataNotFoundError(f"readers.file: file_list={path!r} is {kind}, not a file")
    files, labels = [], []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"file_list {path}:{lineno}"  # path:line, as compilers write it
            try:
                line = raw.decode("utf-8").rstrip()
            except UnicodeDecodeError as e:
                raise ArgumentError(
                    f"readers.file: {where}: not UTF-8 text (byte 0x{raw[e.start]:02x} at "
                    f"column {e.start + 1}); a file list is UTF-8, one 'filename label' a line"
                ) from None
            if not line.strip():
                continue
            m = _LIST_LINE.match(line.lstrip())
            if m is None:
                raise ArgumentError(
                    f"readers.file: {where}: expected 'filename label' with a non-negative "
                    f"integer label, got {line!r}"
                )
            files.append(m.group(1))
            labels.append(_label(m.group(2), where))
    if not files:
        raise ArgumentError(
            f"readers.file: file_list={path!r} lists no files (it is empty or blank); "
            "one 'filename label' a line"
        )
    return files, labels


def check_files(files: Sequence, labels: Sequence | None) -> tuple[list[str], list[int]]:
    """``files=`` (str or path-like entries, none empty) and ``labels=`` (non-negative int32
    integers, one per file; by default each file's index), each error naming the entry."""
    out = []
    for i, f in enumerate(files):
        if not isinstance(f, str | os.PathLike):
            raise ArgumentError(
                f"readers.file: files[{i}]={f!r} is a {type(f).__name__}; give paths (str)"
            )
        f = os.fspath(f)
        if not isinstance(f, str) or not f:
            raise ArgumentError(f"readers.file: files[{i}]={f!r} is not a file name")
        out.append(f)
    if labels is None:
        return out, list(range(len(out)))
    labels = list(labels)
    if len(labels) != len(out):
        raise ArgumentError(
            f"readers.file: labels has {len(labels)} entries but files has {len(out)}"
        )
    for i, v in enumerate(labels):
        if not is_int(v) or not 0 <= v <= _LABEL_MAX:
            raise ArgumentError(
                f"readers.file: labels[{i}]={v!r} (for {out[i]!r}) must be an integer in "
                f"[0, {_LABEL_MAX}]"
            )
    return out, [int(v) for v in labels]


@register(legacy=("FileReader",))
class FileReader(ShardedReader, Operator):
    """Reads files as raw bytes (1-D uint8) with an int32 label of shape (1,).

    Give the files in exactly one way: ``file_root`` alone (each immediate subdirectory, sorted,
    is a class), ``file_list`` (lines of ``name label``), or ``files`` (+ optional ``labels``).
    Sharding, shuffling and padding follow DALI (see ``readers/_sharding.py``). On Linux the
    files of a batch are read by helper processes into shared memory (``_read_process.py``;
    ``DLPIPE_READ_PROCESS=0`` reads them in the pipeline's process instead).

    Example:
        >>> jpegs, labels = fn.readers.file(file_root="/data/train", random_shuffle=True,
        ...                                 shard_id=0, num_shards=2, name="Reader")
    """

    schema = "readers.file"
    num_inputs = (0, 0)
    num_outputs = 2
    is_random = True
    is_reader = True
    batch_level = True  # a batch's files are read in one request to the read process

    def setup(
        self,
        *,
        file_root: str | None = None,
        file_list: str | None = None,
        files: Sequence[str] | None = None,
        labels: Sequence[int] | None = None,
        file_filters: Sequence[str] | str = KNOWN_EXTENSIONS,
        dir_filters: Sequence[str] | str | None = None,
        case_sensitive_filter: bool = False,
        shard_id: int = 0,
        num_shards: int = 1,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        shuffle_after_epoch: bool = False,
        stick_to_shard: bool | None = None,
        pad_last_batch: bool = False,
        prefetch_queue_depth: int = 1,
        read_ahead: bool = False,
        dont_use_mmap: bool = False,
        lazy_init: bool = False,
        skip_cached_images: bool = False,
        tensor_init_bytes: int = 1048576,
        shuffle_after_epoch_seed: int | None = None,
    ) -> None:
        who = "readers.file"
        if files is not None and file_list is not None:
            raise ArgumentError(f"{who}: give either files= or file_list=, not both")
        if labels is not None and files is None:
            raise ArgumentError(f"{who}: labels= needs files=")
        if files is None and file_list is None and file_root is None:
            raise ArgumentError(f"{who}: give file_root=, file_list= or files=")

        if files is not None:
            files = [files] if isinstance(files, str | os.PathLike) else list(files)
            if not files:
                raise ArgumentError(f"{who}: files= is empty")
            files, labels = check_files(files, labels)
            base = file_root or ""
        elif file_list is not None:
            files, labels = parse_file_list(file_list)
            base = file_root if file_root is not None else os.path.dirname(file_list)
        else:
            filters = [file_filters] if isinstance(file_filters, str) else list(file_filters)
            dfilters = [dir_filters] if isinstance(dir_filters, str) else dir_filters
            files, labels = list_file_root(file_root, filters, dfilters, case_sensitive_filter)
            base = file_root
        if not files:
            raise DataNotFoundError(f"{who}: No files found in file_root={file_root!r}")

        self._init_reading()
        self.files = files
        self.paths = [os.path.join(base, f) for f in files]
        self.labels = np.asarray(labels, dtype=np.int32)
        if (self.labels < 0).any():
            raise ArgumentError(f"{who}: labels must be non-negative")
        self.loader = ListSharding(
            len(self.files),
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=random_shuffle,
            initial_fill=initial_fill,
            shuffle_after_epoch=shuffle_after_epoch,
            shuffle_after_epoch_seed=shuffle_after_epoch_seed,
            stick_to_shard=stick_to_shard,
            pad_last_batch=pad_last_batch,
            who=f"{who} {self.name or ''}".strip(),
        )

    def _init_reading(self) -> None:
        """The reading machinery's state (also for readers built on this one, e.g. COCO's)."""
        self._reads = _read_process.BatchReads(self.schema, read_file, _read_error)
        self._reader: ThreadPoolExecutor | None = None  # reads ahead (prefetch)
        self._ahead: deque = deque()  # (params, future) of reads started ahead, in order

    def prepare(self, ctx) -> None:
        self._reads.configure(ctx.runtime)

    def source_info(self, param: int) -> str:
        return self.files[param]

    def prefetch(self, params) -> None:
        """Read the batch ``params`` on the reader's own thread, starting now (DALI's readers
        have a prefetch thread too): the pipeline's stage thread goes on with the iteration
        before, and ``run_batch_cpu`` takes the bytes when it gets there. Reads run one at a
        time, in order, so the read processes see one caller (BENCHMARKS.md, "Reading
        ahead")."""
        if self._reader is None:
            self._reader = ThreadPoolExecutor(1, thread_name_prefix="dlpipe-read-ahead")
        self._ahead.append((params, self._reader.submit(self._read, params)))

    def run_batch_cpu(self, inputs, args, params):
        while self._ahead and self._ahead[0][0] is not params:
            self._ahead.popleft()  # read for params that never came (only the next ones do)
        if self._ahead:
            data = self._ahead.popleft()[1].result()
        else:
            data = self._read(params)
        return data, self.labels[params].reshape(-1, 1)

    def _read(self, params) -> list[np.ndarray]:
        return self._reads.read([self.paths[p] for p in params])

    def close(self) -> None:
        if self._reader is not None:  # reads queued for iterations that will not run
            self._reader.shutdown(wait=True, cancel_futures=True)
            self._reader = None
        self._ahead.clear()
        self._reads.close()


def _read_error(path: str, e: OSError) -> DataNotFoundError:
    if isinstance(e, FileNotFoundError):
        return DataNotFoundError(f"readers.file: {path!r} no longer exists")
    return DataNotFoundError(f"readers.file: cannot read {path!r}: {e}")


def read_file(path: str) -> np.ndarray:
    """The file's bytes as a writable 1-D uint8 array. Plain ``os`` calls: fewer Python layers
    per file than ``open()``, which counts when one thread reads thousands of files a second."""
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer (refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise _read_error(path, e) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _special_kind(st.st_mode)
            raise OSError(errno.EINVAL, f"it is {kind}, not a file")
        buf = np.empty(st.st_size, dtype=np.uint8)
        got = os.readv(fd, [buf])
        while got < buf.size:  # a short read (signals, special files): read the rest
            more = os.readv(fd, [buf[got:]])
            if more == 0:
                return buf[:got]
            got += more
        return buf
    except OSError as e:
        raise _read_error(path, e) from None
    finally:
        os.close(fd)
