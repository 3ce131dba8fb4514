"""``fn.readers.mxnet``: images and labels from MXNet RecordIO files (``.rec`` + ``.idx``).

A RecordIO file (dmlc-core's format) is a sequence of records, each one or more *parts*::

    uint32 magic 0xced7230a | uint32 lrecord | data[length] | zero padding to 4 bytes

(little-endian). ``lrecord`` holds the part's length in its low 29 bits and a continuation flag
in its top 3: 0 a whole record, 1 the first part, 2 a middle part, 3 the last part. The writer
splits a record wherever its data holds the magic number at a 4-byte-aligned offset, dropping
those 4 bytes; a reader joins the parts and puts the magic back between them.

An image record (``im2rec``) starts with the ``IRHeader``: ``uint32 flag, float32 label,
uint64 id, uint64 id2`` (24 bytes). With ``flag == 0`` the label is that one float; with
``flag > 0`` the label is the ``flag`` float32 values following the header. The rest is the
encoded image.

The index (``.idx``, from ``im2rec``, DALI's ``rec2idx`` or ``dlpipe make-rec-index``) holds one
``key<TAB>offset`` line per record. As in DALI's ``RecordIOLoader``, there is one index for
all files: its offsets count through the files laid end to end, are sorted, and each record
runs to the next offset (the last one to the end of the last file); zero-sized entries are
dropped.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError, DataNotFoundError, DecodeError
from ..graph import Operator, register
from ._sharding import DATALOADER_SEED, ShardedLoader, ShardedReader, file_order_shuffle
from .tfrecord import PositionalReader, _as_list

WHO = "readers.mxnet"
MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack("<I", MAGIC)
_PART = struct.Struct("<II")  # magic, lrecord
_IR_HEADER = struct.Struct("<IfQQ")  # flag, label, id, id2


def _part_flag(lrec: int) -> int:
    return (lrec >> 29) & 7


def _part_length(lrec: int) -> int:
    return lrec & ((1 << 29) - 1)


def _padded(n: int) -> int:
    return (n + 3) & ~3


# --- the record format ------------------------------------------------------------------------


def join_parts(buf: memoryview | bytes, where: str) -> bytes:
    """The payload of the record at the start of ``buf``: its parts joined, magics restored.

    Args:
        buf: the record's bytes (it may run on past the record).
        where: "file, offset" for error messages.

    Raises:
        DecodeError: a part without the magic number, a continuation flag out of order, or a
            part running past ``buf``.
    """
    pos, pieces, first = 0, [], True
    while True:
        if pos + _PART.size > len(buf):
            raise DecodeError(
                f"{WHO}: {where}: the record is cut off (a part header at byte {pos} of {len(buf)})"
            )
        magic, lrec = _PART.unpack_from(buf, pos)
        if magic != MAGIC:
            raise DecodeError(
                f"{WHO}: {where}: wrong magic number 0x{magic:08x} at byte {pos} of the record "
                f"(RecordIO needs 0x{MAGIC:08x}; not a .rec file, or a wrong index?)"
            )
        flag, length = _part_flag(lrec), _part_length(lrec)
        if flag > 3 or (flag in (0, 1)) != first:
            raise DecodeError(
                f"{WHO}: {where}: continuation flag {flag} at byte {pos} of the record is out of "
                "order (a corrupt record)"
            )
        start = pos + _PART.size
        if start + length > len(buf):
            raise DecodeError(
                f"{WHO}: {where}: a part of {length} bytes at byte {pos} runs past the record "
                f"({len(buf)} bytes; a corrupt record or a wrong index)"
            )
        if not first:
            pieces.append(_MAGIC_BYTES)
        pieces.append(bytes(buf[start : start + length]))
        if flag in (0, 3):
            return b"".join(pieces)
        pos = start + _padded(length)
        first = False


def parse_image_record(payload: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(encoded image as 1-D uint8, label as 1-D float32) of an ``im2rec`` record's payload.

    Raises:
        DecodeError: the payload is shorter than its header and labels.
    """
    if len(payload) < _IR_HEADER.size:
        raise DecodeError(
            f"{WHO}: {where}: the record holds {len(payload)} bytes, fewer than the "
            f"{_IR_HEADER.size}-byte image record header"
        )
    flag, label, _, _ = _IR_HEADER.unpack_from(payload, 0)
    data = np.frombuffer(payload, dtype=np.uint8, offset=_IR_HEADER.size)
    if flag == 0:
        return data.copy(), np.array([label], dtype=np.float32)
    need = 4 * flag
    if need > data.size:
        raise DecodeError(
            f"{WHO}: {where}: the header announces {flag} labels ({need} bytes) but the "
            f"record has {data.size} bytes after its header"
        )
    labels = data[:need].view("<f4").astype(np.float32)
    return data[need:].copy(), labels


def scan_recordio(path: str, who: str = WHO) -> list[int]:
    """The offset of every record in the RecordIO file ``path`` (parts followed, not joined).

    Raises:
        DataNotFoundError: the file does not exist.
        DecodeError: a part without the magic number, out of order, or cut off by the end of
            the file; the message names the file and the offset.
    """
    if not os.path.isfile(path):
        raise DataNotFoundError(f"{who}: RecordIO file {path!r} does not exist")
    size = os.path.getsize(path)
    offsets, pos, inside = [], 0, False
    with open(path, "rb") as f:
        while pos < size:
            f.seek(pos)
            head = f.read(_PART.size)
            if len(head) < _PART.size:
                raise DecodeError(f"{who}: RecordIO file {path!r}: truncated part at offset {pos}")
            magic, lrec = _PART.unpack(head)
            if magic != MAGIC:
                raise DecodeError(
                    f"{who}: RecordIO file {path!r}: wrong magic number 0x{magic:08x} at offset "
                    f"{pos} (not a RecordIO file?)"
                )
            flag, length = _part_flag(lrec), _part_length(lrec)
            if flag > 3 or (flag in (0, 1)) == inside:
                raise DecodeError(
                    f"{who}: RecordIO file {path!r}: continuation flag {flag} at offset {pos} is "
                    "out of order"
                )
            if not inside:
                offsets.append(pos)
            end = pos + _PART.size + length
            if end > size:
                raise DecodeError(
                    f"{who}: RecordIO file {path!r}: the record at offset {offsets[-1]} is cut "
                    f"off: its part at offset {pos} needs {length} bytes but the file ends after "
                    f"{size - pos - _PART.size}"
                )
            inside = flag in (1, 2)
            pos = pos + _PART.size + _padded(length)
    if inside:
        raise DecodeError(f"{who}: RecordIO file {path!r}: the last record has no final part")
    return offsets


def read_rec_index(index_path: str, sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(global offset, size) of every record listed by ``index_path``, as DALI reads it.

    Args:
        index_path: ``key offset`` lines (any whitespace).
        sizes: the sizes of the RecordIO files, in order (offsets count through them all).

    Raises:
        DataNotFoundError: the index does not exist, or lists an offset past the files' end.
        DecodeError: a malformed line, or no entries.
    """
    if not os.path.isfile(index_path):
        raise DataNotFoundError(f"{WHO}: index file {index_path!r} does not exist")
    total = sum(sizes)
    offsets = []
    with open(index_path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                if len(parts) != 2:
                    raise ValueError
                offset = int(parts[1])
                int(parts[0])
            except ValueError:
                raise DecodeError(
                    f"{WHO}: index file {index_path!r} line {lineno}: expected 'key offset' "
                    f"(two integers), got {line.strip()!r}"
                ) from None
            if not 0 <= offset < total:
                raise DataNotFoundError(
                    f"{WHO}: index file {index_path!r} line {lineno}: offset {offset} lies past "
                    f"the end of the RecordIO data ({total} bytes)"
                )
            offsets.append(offset)
    if not offsets:
        raise DecodeError(f"{WHO}: index file {index_path!r} lists no records")
    offsets.sort()
    ends = offsets[1:] + [total]
    return [(o, e - o) for o, e in zip(offsets, ends, strict=True) if e > o]


# --- the operator -----------------------------------------------------------------------------


@register(legacy=("MXNetReader",))
class MXNetReader(ShardedReader, Operator):
    """Reads MXNet RecordIO image records: the encoded image (1-D uint8) and its label
    (float32: shape (1,), or (flag,) for records with several labels).

    Records are sharded by index over all files together, as DALI does; there is no global
    shuffle (only the ``initial_fill`` buffer), so the data should be pre-shuffled (``im2rec``
    shuffles by default). Each sample's ``source_info`` is ``"<file> at index <offset>"``.

    Args:
        path: the RecordIO file(s).
        index_path: a list of one index file for all of them (``im2rec``'s ``.idx``, DALI's
            ``rec2idx`` or ``dlpipe make-rec-index``). None (a dlpipe extension) scans the
            files at construction.
        shuffle_after_epoch: shuffle the order of the *files* every epoch (records inside a
            file stay in order); forces ``stick_to_shard``.
        shuffle_after_epoch_seed: base seed of that shuffle (default 524287).
        shard_id, num_shards, random_shuffle, initial_fill, stick_to_shard, pad_last_batch,
        prefetch_queue_depth, read_ahead, dont_use_mmap, lazy_init, skip_cached_images,
        tensor_init_bytes: as in ``fn.readers.file`` (reads are plain ``pread`` calls).

    Example:
        >>> jpegs, labels = fn.readers.mxnet(path=["train.rec"], index_path=["train.idx"],
        ...                                  random_shuffle=True, shard_id=0, num_shards=8,
        ...                                  name="Reader")
    """

    schema = "readers.mxnet"
    ops_name = "MXNet"
    num_inputs = (0, 0)
    num_outputs = 2
    is_random = True
    is_reader = True
    light = True  # a positional read and a few slices per sample

    def setup(
        self,
        *,
        path: Sequence[str] | str | None = None,
        index_path: Sequence[str] | str | None = None,
        shard_id: int = 0,
        num_shards: int = 1,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        stick_to_shard: bool = False,
        pad_last_batch: bool = False,
        shuffle_after_epoch: bool = False,
        shuffle_after_epoch_seed: int | None = None,
        prefetch_queue_depth: int = 1,
        read_ahead: bool = False,
        dont_use_mmap: bool = False,
        lazy_init: bool = False,
        skip_cached_images: bool = False,
        tensor_init_bytes: int = 1048576,
    ) -> None:
        paths = _as_list(path, "path", WHO)
        if not paths:
            raise ArgumentError(f"{WHO}: path={path!r}: give at least one RecordIO file")
        if shuffle_after_epoch and stick_to_shard:
            raise ArgumentError(
                f"{WHO}: shuffle_after_epoch=True cannot go with stick_to_shard=True"
            )
        for p in paths:
            if not os.path.isfile(p):
                raise DataNotFoundError(f"{WHO}: RecordIO file {p!r} does not exist")
        sizes = [os.path.getsize(p) for p in paths]
        # Where each file starts in the files laid end to end.
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if index_path is None:
            records = []
            for k, p in enumerate(paths):
                offsets = scan_recordio(p)
                ends = offsets[1:] + [sizes[k]]
                start = int(self._starts[k])
                records += [(start + o, e - o) for o, e in zip(offsets, ends, strict=True)]
            if not records:
                raise DataNotFoundError(f"{WHO}: {paths!r} hold no records")
        else:
            index_paths = _as_list(index_path, "index_path", WHO)
            if len(index_paths) != 1:
                raise ArgumentError(
                    f"{WHO}: index_path={index_path!r} must be a list of one index file (one "
                    "index covers all the RecordIO files)"
                )
            records = read_rec_index(index_paths[0], sizes)

        self.paths = paths
        self._offset = np.array([o for o, _ in records], dtype=np.int64)
        self._size = np.array([s for _, s in records], dtype=np.int64)
        self._file = np.searchsorted(self._starts, self._offset, side="right") - 1
        self._io = PositionalReader(WHO)
        per_file = [np.flatnonzero(self._file == i) for i in range(len(paths))]
        seed = DATALOADER_SEED if shuffle_after_epoch_seed is None else shuffle_after_epoch_seed
        self.loader = ShardedLoader(
            len(records),
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=random_shuffle,
            initial_fill=initial_fill,
            stick_to_shard=bool(stick_to_shard) or shuffle_after_epoch,
            pad_last_batch=pad_last_batch,
            who=f"{WHO} {self.name or ''}".strip(),
            reorder=file_order_shuffle(per_file, seed) if shuffle_after_epoch else None,
        )

    def output_layouts(self, input_layouts):
        return ["", ""]

    def _local(self, param: int) -> tuple[str, int]:
        f = int(self._file[param])
        return self.paths[f], int(self._offset[param] - self._starts[f])

    def source_info(self, param: int) -> str:
        path, offset = self._local(param)
        return f"{path} at index {offset}"

    def read_record(self, param: int) -> np.ndarray:
        """The bytes of record ``param``; a record may run on into the next file, as DALI's
        loader allows."""
        offset, size = int(self._offset[param]), int(self._size[param])
        f = int(self._file[param])
        chunks = []
        while size > 0:
            local = offset - int(self._starts[f])
            n = min(size, int(self._starts[f + 1]) - offset)
            chunks.append(self._io.read(self.paths[f], local, n))
            offset, size, f = offset + n, size - n, f + 1
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def run_sample(self, inputs, args, param):
        path, offset = self._local(param)
        where = f"{path!r}, record at offset {offset}"
        payload = join_parts(memoryview(self.read_record(param)), where)
        return parse_image_record(payload, where)
