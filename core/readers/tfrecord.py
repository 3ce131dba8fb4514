"""``fn.readers.tfrecord``: ``tf.train.Example`` records from TFRecord files, without TensorFlow.

A TFRecord file is a sequence of records, each framed as::

    uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)

(little-endian). The data is a serialized ``tf.train.Example`` protobuf; this module decodes
the framing, and the message by hand with ``_protobuf.py`` (Example -> Features ->
map<string, Feature> -> BytesList / FloatList / Int64List, packed or not), and checks both CRCs.

All files form one dataset of records, sharded by record index (DALI's ``IndexedFileLoader``);
the index files (one ``offset size`` line per record, DALI's ``tfrecord2idx`` format, made by
``dlpipe make-tfrecord-index``) say where each record lies.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

import numpy as np

from .. import tfrecord as tfrec
from ..errors import ArgumentError, DataNotFoundError, DecodeError
from ..graph import Operator, register
from ._protobuf import WireError, fields, repeated_floats, repeated_varints
from ._sharding import DATALOADER_SEED, ShardedLoader, ShardedReader, file_order_shuffle

# --- CRC-32C (Castagnoli) ---------------------------------------------------------------------

_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _make_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _make_table()
_TABLE_LIST = [int(x) for x in _TABLE]
_CHUNK = 64  # bytes per lane in the vectorised CRC


def _crc32c_bytewise(data: bytes | memoryview, crc: int = 0xFFFFFFFF) -> int:
    """The plain table-driven register update (no final xor)."""
    table = _TABLE_LIST
    for b in bytes(data):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def _apply(tables: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Apply a linear map on 32-bit CRC registers, given as 4 byte tables of 256 entries."""
    return (
        tables[0][x & 0xFF]
        ^ tables[1][(x >> 8) & 0xFF]
        ^ tables[2][(x >> 16) & 0xFF]
        ^ tables[3][(x >> 24) & 0xFF]
    )


def _zero_byte_tables() -> np.ndarray:
    """The map 'feed one zero byte' (register -> register) as byte tables."""
    v = np.arange(256, dtype=np.uint32)
    out = np.empty((4, 256), dtype=np.uint32)
    for k in range(4):
        x = v << np.uint32(8 * k)
        out[k] = _TABLE[x & 0xFF] ^ (x >> 8)
    return out


def _square(tables: np.ndarray) -> np.ndarray:
    return _apply(tables, tables.ravel()).reshape(4, 256)


_SHIFT_TABLES: list[np.ndarray] = []  # [k]: feed _CHUNK * 2**k zero bytes
_shift_lock = threading.Lock()


def _shift_tables(k: int) -> np.ndarray:
    with _shift_lock:
        if not _SHIFT_TABLES:
            t = _zero_byte_tables()
            for _ in range(_CHUNK.bit_length() - 1):  # _CHUNK is a power of two
                t = _square(t)
            _SHIFT_TABLES.append(t)
        while len(_SHIFT_TABLES) <= k:
            _SHIFT_TABLES.append(_square(_SHIFT_TABLES[-1]))
        return _SHIFT_TABLES[k]


def crc32c(data: bytes | memoryview | np.ndarray) -> int:
    """CRC-32C of ``data`` (``crc32c(b"123456789") == 0xE3069283``).

    Long buffers are split into 64-byte lanes whose CRCs are computed side by side with numpy
    and then folded together (the CRC register update is linear over GF(2)); short ones take
    the byte-wise loop.
    """
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    n = buf.size
    if n < 4 * _CHUNK:
        return _crc32c_bytewise(buf.tobytes()) ^ 0xFFFFFFFF
    # Starting from 0xFFFFFFFF equals starting from 0 with the first 4 bytes complemented;
    # from state 0, leading zero bytes change nothing, so pad at the front.
    lanes = -(-n // _CHUNK)
    padded = np.zeros(lanes * _CHUNK, dtype=np.uint8)
    pad = lanes * _CHUNK - n
    padded[pad:] = buf
    padded[pad : pad + 4] ^= 0xFF
    cols = padded.reshape(lanes, _CHUNK).T.astype(np.uint32)
    reg = np.zeros(lanes, dtype=np.uint32)
    table = _TABLE
    for j in range(_CHUNK):
        reg = table[(reg ^ cols[j]) & 0xFF] ^ (reg >> 8)
    k = 0
    while reg.size > 1:
        if reg.size & 1:
            reg = np.concatenate([np.zeros(1, dtype=np.uint32), reg])
        reg = _apply(_shift_tables(k), reg[0::2]) ^ reg[1::2]
        k += 1
    return int(reg[0]) ^ 0xFFFFFFFF


def masked_crc32c(data: bytes | memoryview | np.ndarray) -> int:
    """TFRecord's masked CRC: rotate right by 15 bits, add 0xA282EAD8."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


# --- tf.train.Example -------------------------------------------------------------------------


class _Values:
    """The values one ``Feature`` holds: kind is "bytes", "float", "int64" or None (empty)."""

    __slots__ = ("kind", "items")

    def __init__(self) -> None:
        self.kind: str | None = None
        self.items: list = []

    def start(self, kind: str) -> None:
        if self.kind != kind:  # a oneof: another kind replaces, the same kind merges
            self.kind, self.items = kind, []


def _parse_list(buf: bytes, start: int, stop: int, kind: str, out: _Values) -> None:
    out.start(kind)
    add = out.items.append
    for field, wire, value in fields(buf, start, stop):
        if field != 1:
            continue
        if kind == "bytes":
            if wire != 2:
                raise WireError("BytesList value is not length-delimited")
            add([buf[value[0] : value[1]]])
        elif kind == "float":
            add(repeated_floats(buf, wire, value, "FloatList value"))
        else:
            add(repeated_varints(buf, wire, value, "Int64List value"))


_KINDS = {1: "bytes", 2: "float", 3: "int64"}


def parse_example(data: bytes) -> dict[str, _Values]:
    """Decode a serialized ``tf.train.Example`` into {feature name: values}.

    Raises:
        ValueError: malformed wire data.
    """
    features: dict[str, _Values] = {}
    for f1, w1, v1 in fields(data, 0, len(data)):
        if f1 != 1 or w1 != 2:
            continue  # Example.features
        for f2, w2, v2 in fields(data, *v1):
            if f2 != 1 or w2 != 2:
                continue  # Features.feature (map entries)
            key, values = "", _Values()
            for f3, w3, v3 in fields(data, *v2):
                if f3 == 1 and w3 == 2:
                    try:
                        key = data[v3[0] : v3[1]].decode("utf-8")
                    except UnicodeDecodeError:
                        raise WireError("feature name is not UTF-8") from None
                elif f3 == 2 and w3 == 2:
                    values = _Values()  # a repeated map value replaces the earlier one
                    for f4, w4, v4 in fields(data, *v3):
                        if f4 in _KINDS and w4 == 2:
                            _parse_list(data, *v4, _KINDS[f4], values)
            features[key] = values  # a repeated key: the last entry wins
    return features


# --- records and index files ------------------------------------------------------------------

_HEADER = struct.Struct("<QI")


def read_index(index_path: str, data_path: str) -> list[tuple[int, int]]:
    """Parse a ``tfrecord2idx`` index file and check its entries against the data file.

    Raises:
        DataNotFoundError: a missing file, or an entry past the end of the data file.
        DecodeError: a malformed line.
    """
    if not os.path.isfile(index_path):
        raise DataNotFoundError(f"readers.tfrecord: index file {index_path!r} does not exist")
    if not os.path.isfile(data_path):
        raise DataNotFoundError(f"readers.tfrecord: TFRecord file {data_path!r} does not exist")
    file_size = os.path.getsize(data_path)
    entries: list[tuple[int, int]] = []
    with open(index_path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            try:
                if len(parts) != 2:
                    raise ValueError
                offset, size = int(parts[0]), int(parts[1])
            except ValueError:
                raise DecodeError(
                    f"readers.tfrecord: index file {index_path!r} line {lineno}: expected "
                    f"'offset size', got {line.strip()!r}"
                ) from None
            if offset < 0 or size < _HEADER.size + 4:
                raise DecodeError(
                    f"readers.tfrecord: index file {index_path!r} line {lineno}: invalid entry "
                    f"offset={offset} size={size}"
                )
            if offset + size > file_size:
                raise DataNotFoundError(
                    f"readers.tfrecord: index file {index_path!r} line {lineno}: the record at "
                    f"offset {offset} (size {size}) lies past the end of {data_path!r} "
                    f"({file_size} bytes)"
                )
            entries.append((offset, size))
    return entries


def scan_records(path: str) -> list[tuple[int, int]]:
    """Walk a TFRecord file's framing: one (offset, size) per record, size counting the framing.

    Checks each length CRC (a data CRC is checked when the record is read).

    Raises:
        DataNotFoundError: the file does not exist.
        DecodeError: a record with a bad length CRC, or one cut off by the end of the file.
    """
    if not os.path.isfile(path):
        raise DataNotFoundError(f"TFRecord file {path!r} does not exist")
    entries = []
    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        offset = 0
        while offset < file_size:
            head = f.read(_HEADER.size)
            if len(head) < _HEADER.size:
                raise DecodeError(
                    f"TFRecord file {path!r}: truncated record header at offset {offset}"
                )
            length, length_crc = _HEADER.unpack(head)
            if masked_crc32c(head[:8]) != length_crc:
                raise DecodeError(
                    f"TFRecord file {path!r}: bad length CRC of the record at offset {offset}"
                )
            size = _HEADER.size + length + 4
            if offset + size > file_size:
                raise DecodeError(
                    f"TFRecord file {path!r}: the record at offset {offset} needs {size} bytes "
                    f"but the file ends after {file_size - offset}"
                )
            entries.append((offset, size))
            offset += size
            f.seek(offset)
    return entries


class PositionalReader:
    """Thread-safe ``pread`` of byte ranges.

    Keeps up to ``max_open`` descriptors (least recently used closed first, never one that a
    read is using), so datasets of thousands of shards stay under the open-file limit.
    """

    def __init__(self, who: str, max_open: int = 64):
        self.who = who
        self.max_open = max_open
        self._fds: OrderedDict[str, list[int]] = OrderedDict()  # path -> [fd, readers]
        self._lock = threading.Lock()

    def _acquire(self, path: str) -> int:
        with self._lock:
            entry = self._fds.get(path)
            if entry is None:
                try:
                    entry = [os.open(path, os.O_RDONLY), 0]
                except OSError as e:
                    raise DataNotFoundError(f"{self.who}: cannot open {path!r}: {e}") from None
                self._fds[path] = entry
            else:
                self._fds.move_to_end(path)
            entry[1] += 1
            if len(self._fds) > self.max_open:
                for old, (fd, users) in self._fds.items():
                    if users == 0:
                        os.close(fd)
                        del self._fds[old]
                        break
            return entry[0]

    def _release(self, path: str) -> None:
        with self._lock:
            self._fds[path][1] -= 1

    def read(self, path: str, offset: int, size: int) -> np.ndarray:
        """``size`` bytes of ``path`` from ``offset``, as a new uint8 array."""
        buf = np.empty(size, dtype=np.uint8)
        view, got = memoryview(buf), 0
        fd = self._acquire(path)
        try:
            while got < size:
                try:
                    n = os.preadv(fd, [view[got:]], offset + got)
                except OSError as e:
                    raise DataNotFoundError(
                        f"{self.who}: cannot read {path!r} at offset {offset}: {e}"
                    ) from None
                if n == 0:
                    raise DataNotFoundError(
                        f"{self.who}: {path!r} ends before offset {offset} + {size} "
                        f"(got {got} bytes)"
                    )
                got += n
        finally:
            self._release(path)
        return buf

    def close(self) -> None:
        with self._lock:
            for fd, _ in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


# --- the operator -----------------------------------------------------------------------------


def _as_list(value, name: str, who: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str | os.PathLike):
        return [os.fspath(value)]
    try:
        return [os.fspath(v) for v in value]
    except TypeError:
        raise ArgumentError(f"{who}: {name}={value!r} must be a path or a list of paths") from None


@register(legacy=("TFRecordReader",))
class TFRecordReader(ShardedReader, Operator):
    """Reads ``tf.train.Example`` records from TFRecord files (no TensorFlow needed).

    A call returns a dict {feature name: node}, as in DALI (``inputs["image/encoded"]``), one
    output per entry of ``features``, in the dict's order: ``FixedLenFeature`` values are
    reshaped to its shape (its default fills a missing feature), ``VarLenFeature`` values are
    1-D (or ``(-1, *partial_shape)``), string features are their bytes as 1-D uint8. Records
    are sharded by index over all files together; the reader does not shuffle globally (only
    through the ``initial_fill`` buffer), so the data should be pre-shuffled.

    Args:
        path: TFRecord file(s).
        index_path: one index file per TFRecord file (``dlpipe make-tfrecord-index`` or DALI's
            ``tfrecord2idx``). None (a dlpipe extension) scans the files at construction.
        features: {name: ``tfrec.FixedLenFeature(...)`` or ``tfrec.VarLenFeature(...)``}.
        use_o_direct: accepted for compatibility (needs ``dont_use_mmap=True``); reads are
            plain ``pread`` calls either way.
        shuffle_after_epoch: shuffle the order of the *files* every epoch (records inside a file
            stay in order); forces ``stick_to_shard``.
        shuffle_after_epoch_seed: base seed of that shuffle (default 524287).
        shard_id, num_shards, random_shuffle, initial_fill, stick_to_shard, pad_last_batch,
        prefetch_queue_depth, read_ahead, dont_use_mmap, lazy_init, skip_cached_images,
        tensor_init_bytes: as in ``fn.readers.file``.

    Example:
        >>> import dlpipe.tfrecord as tfrec
        >>> inputs = fn.readers.tfrecord(
        ...     path=["train-0.tfrecord"], index_path=["train-0.idx"], name="Reader",
        ...     features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
        ...               "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)})
        >>> jpegs, labels = inputs["image/encoded"], inputs["image/class/label"]
    """

    schema = "readers.tfrecord"
    ops_name = "TFRecord"
    num_inputs = (0, 0)
    num_outputs = 1
    is_random = True
    is_reader = True

    def setup(
        self,
        *,
        path: Sequence[str] | str | None = None,
        index_path: Sequence[str] | str | None = None,
        features: Mapping[str, tfrec.Feature] | None = None,
        use_o_direct: bool = False,
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
        who = "readers.tfrecord"
        paths = _as_list(path, "path", who)
        if not paths:
            raise ArgumentError(f"{who}: path={path!r}: give at least one TFRecord file")
        if not isinstance(features, Mapping) or not features:
            raise ArgumentError(
                f"{who}: features={features!r} must be a non-empty dict of "
                "{name: tfrec.FixedLenFeature(...) or tfrec.VarLenFeature(...)}"
            )
        for name, feat in features.items():
            if not isinstance(name, str) or not isinstance(feat, tfrec.Feature):
                raise ArgumentError(
                    f"{who}: features[{name!r}]={feat!r} must be a tfrec.FixedLenFeature or "
                    "tfrec.VarLenFeature under a string name"
                )
        if use_o_direct and not dont_use_mmap:
            raise ArgumentError(f"{who}: use_o_direct=True needs dont_use_mmap=True")
        if shuffle_after_epoch and stick_to_shard:
            raise ArgumentError(
                f"{who}: shuffle_after_epoch=True cannot go with stick_to_shard=True"
            )
        if index_path is None:
            entries = [scan_records(p) for p in paths]
        else:
            index_paths = _as_list(index_path, "index_path", who)
            if len(index_paths) != len(paths):
                raise ArgumentError(
                    f"{who}: index_path has {len(index_paths)} entries but path has {len(paths)}"
                )
            entries = [read_index(i, p) for i, p in zip(index_paths, paths, strict=True)]

        self.paths = paths
        self.features = dict(features)
        self.num_outputs = len(self.features)
        # Per record: file index, offset, size.
        self._file = np.concatenate(
            [np.full(len(e), i, dtype=np.int64) for i, e in enumerate(entries)]
        )
        flat = [x for e in entries for x in e]
        if not flat:
            raise DataNotFoundError(f"{who}: the index files of {paths!r} list no records")
        self._offset = np.array([o for o, _ in flat], dtype=np.int64)
        self._size = np.array([s for _, s in flat], dtype=np.int64)
        per_file = [np.flatnonzero(self._file == i) for i in range(len(paths))]
        seed = DATALOADER_SEED if shuffle_after_epoch_seed is None else shuffle_after_epoch_seed
        self._io = PositionalReader(who)
        self.loader = ShardedLoader(
            len(self._offset),
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=random_shuffle,
            initial_fill=initial_fill,
            stick_to_shard=bool(stick_to_shard) or shuffle_after_epoch,
            pad_last_batch=pad_last_batch,
            who=f"{who} {self.name or ''}".strip(),
            reorder=file_order_shuffle(per_file, seed) if shuffle_after_epoch else None,
        )

    def output_names(self) -> list[str]:
        """The feature names, one per output (DALI's dict keys)."""
        return list(self.features)

    def after_call(self, outputs):
        # As in DALI, a call returns {feature name: node}; handed back as the one "output" so
        # that fn/ops return the dict itself.
        return [dict(zip(self.features, outputs, strict=True))]

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs

    def source_info(self, param: int) -> str:
        return f"{self.paths[self._file[param]]} at index {self._offset[param]}"

    # --- per sample -------------------------------------------------------------------------
    def read_record(self, param: int) -> bytes:
        """The payload of record ``param``, its framing and both CRCs checked."""
        path = self.paths[self._file[param]]
        offset, size = int(self._offset[param]), int(self._size[param])
        raw = self._io.read(path, offset, size)
        length, length_crc = _HEADER.unpack_from(raw, 0)
        where = f"readers.tfrecord: {path!r}, record at offset {offset}"
        if masked_crc32c(raw[:8]) != length_crc:
            raise DecodeError(f"{where}: bad length CRC (not a TFRecord, or a wrong index?)")
        if _HEADER.size + length + 4 != size:
            raise DecodeError(
                f"{where}: the record holds {length} bytes of data, but the index gives it "
                f"{size} bytes in all ({size - _HEADER.size - 4} of data)"
            )
        data = raw[_HEADER.size : _HEADER.size + length]
        (data_crc,) = struct.unpack_from("<I", raw, _HEADER.size + length)
        if masked_crc32c(data) != data_crc:
            raise DecodeError(f"{where}: bad data CRC (the record is corrupt)")
        return data.tobytes()

    def run_sample(self, inputs, args, param):
        data = self.read_record(param)
        path, offset = self.paths[self._file[param]], int(self._offset[param])
        try:
            parsed = parse_example(data)
        except WireError as e:
            raise DecodeError(
                f"readers.tfrecord: {path!r}, record at offset {offset}: malformed "
                f"tf.train.Example ({e})"
            ) from None
        outs = []
        for name, feat in self.features.items():
            try:
                outs.append(_feature_output(feat, parsed.get(name)))
            except ValueError as e:
                raise DecodeError(
                    f"readers.tfrecord: {path!r}, record at offset {offset}: feature {name!r}: {e}"
                ) from None
        return tuple(outs)


_KIND_OF = {tfrec.int64: "int64", tfrec.float32: "float", tfrec.string: "bytes"}


def _feature_output(feat: tfrec.Feature, values: _Values | None) -> np.ndarray:
    kind = _KIND_OF[feat.dtype]
    if values is not None and values.kind not in (None, kind) and values.items:
        raise ValueError(f"holds a {values.kind}_list, the feature spec asks for {kind}_list")
    items = values.items if values is not None and values.kind == kind else []
    if feat.dtype == tfrec.string:
        strings = [s for chunk in items for s in chunk]
        if len(strings) > 1:
            raise ValueError(f"holds {len(strings)} strings; tensors of strings are not supported")
        if strings:
            return np.frombuffer(strings[0], dtype=np.uint8).copy()
        if feat.fixed:
            return np.frombuffer(feat.default, dtype=np.uint8).copy()
        return np.empty(0, dtype=np.uint8)
    dtype = feat.numpy_dtype
    found = values is not None
    flat = np.concatenate(items).astype(dtype, copy=False) if items else np.empty(0, dtype=dtype)
    if feat.fixed:
        shape = feat.shape or (1,)
        count = int(np.prod(shape))
        if not found:
            return np.full(shape, feat.default, dtype=dtype)
        if flat.size != count:
            raise ValueError(
                f"holds {flat.size} values; FixedLenFeature shape {list(feat.shape)} needs {count}"
            )
        return flat.reshape(shape).copy()
    if feat.partial_shape:
        inner = int(np.prod(feat.partial_shape))
        if flat.size % inner:
            raise ValueError(
                f"holds {flat.size} values, not a multiple of partial_shape "
                f"{list(feat.partial_shape)}"
            )
        return flat.reshape(-1, *feat.partial_shape).copy()
    return flat.copy()
