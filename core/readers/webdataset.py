"""``fn.readers.webdataset``: samples from WebDataset tar shards on local disk.

A WebDataset shard is a plain (uncompressed) tar file. Each regular member's name splits at the
first dot of its basename into a *key* and an *extension* (``a/b/x.seg.png`` -> key ``a/b/x``,
extension ``seg.png``); consecutive members sharing a key form one sample. Names whose
basename starts with '.' and non-regular entries are skipped.

The index of every shard (key, extension, offset and size of each member) is built once: from
the index files given (DALI's ``wds2idx`` format, versions v1.0-v1.2, made by
``dlpipe make-wds-index``), or else by walking the tars with :mod:`tarfile` at construction.
Samples are then read per sample with plain positional reads. All shards form one dataset,
sharded by sample index; there is no global shuffle (only the ``initial_fill`` buffer).
"""

from __future__ import annotations

import os
import tarfile
import warnings
from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError, DataNotFoundError, DecodeError
from ..graph import Operator, register
from ..types import to_numpy_dtype
from ._sharding import DATALOADER_SEED, ShardedLoader, ShardedReader, file_order_shuffle
from .tfrecord import PositionalReader, _as_list

BLOCK = 512
INDEX_VERSIONS = ("v1.0", "v1.1", "v1.2")
# One member: (extension, data offset, size, member name).
Component = tuple[str, int, int, str]


def split_name(name: str) -> tuple[str, str]:
    """``dir/key.ext.more`` -> (``dir/key``, ``ext.more``); no dot -> (name, "")."""
    dot = name.find(".", name.rfind("/") + 1)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1 :]


def scan_tar(path: str, who: str = "readers.webdataset") -> list[list[Component]]:
    """Group the regular members of the tar at ``path`` into samples.

    Raises:
        DataNotFoundError: the file does not exist.
        DecodeError: not a tar file, or truncated (a member's data or a header cut off by the
            end of the file, or a damaged header); the message names the file and the offset.
    """
    if not os.path.isfile(path):
        raise DataNotFoundError(f"{who}: tar file {path!r} does not exist")
    file_size = os.path.getsize(path)
    samples: list[list[Component]] = []
    last_key = None
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    continue
                if member.offset_data + member.size > file_size:
                    raise DecodeError(
                        f"{who}: tar file {path!r} is truncated: member {member.name!r} at "
                        f"offset {member.offset_data} needs {member.size} bytes, but the file "
                        f"ends at {file_size}"
                    )
                key, ext = split_name(member.name)
                if not key or key.endswith("/"):
                    continue  # a hidden file (basename starting with '.')
                if key != last_key:
                    samples.append([])
                    last_key = key
                samples[-1].append((ext, member.offset_data, member.size, member.name))
            stop = tar.offset
    except tarfile.TarError as e:
        raise DecodeError(f"{who}: {path!r} is not a readable tar file ({e})") from None
    # tarfile stops silently at a damaged or cut-off header after the first member.
    if stop < file_size:
        with open(path, "rb") as f:
            f.seek(stop)
            tail = f.read(BLOCK)
        if any(tail):
            what = "truncated" if len(tail) < BLOCK else "corrupt"
            raise DecodeError(
                f"{who}: tar file {path!r} has a {what} header at offset {stop} "
                f"({len(tail)} bytes left of a {BLOCK}-byte header block)"
            )
    return samples


def read_wds_index(
    index_path: str, tar_path: str, who: str = "readers.webdataset"
) -> list[tuple[list[Component], int]]:
    """Parse a ``wds2idx`` index file: (components, line number) per sample.

    Line 0 is the header (``v1.2 <samples>``); sample lines are numbered from 1, as in DALI's
    messages.

    Raises:
        DataNotFoundError: a missing file, or a component past the end of the tar.
        DecodeError: a malformed index file (the message names the line).
    """
    for p, what in ((index_path, "index file"), (tar_path, "tar file")):
        if not os.path.isfile(p):
            raise DataNotFoundError(f"{who}: {what} {p!r} does not exist")
    tar_size = os.path.getsize(tar_path)

    def bad(line: int, msg: str) -> DecodeError:
        return DecodeError(f"{who}: malformed index file {index_path!r} line {line}: {msg}")

    with open(index_path, encoding="utf-8", errors="surrogateescape") as f:
        lines = f.read().splitlines()
    header = lines[0].split() if lines else []
    if not header:
        raise bad(0, "no version signature found")
    if header[0] not in INDEX_VERSIONS:
        raise bad(0, f"unsupported version {header[0]!r} (supported: {', '.join(INDEX_VERSIONS)})")
    try:
        count = int(header[1])
    except (IndexError, ValueError):
        raise bad(0, "no sample count found") from None
    if count <= 0:
        raise bad(0, f"sample count must be positive, got {count}")
    if len(lines) - 1 < count:
        raise bad(
            len(lines), f"the header announces {count} samples, the file has {len(lines) - 1}"
        )
    width = 4 if header[0] == "v1.2" else 3
    samples = []
    for line in range(1, count + 1):
        tokens = lines[line].split()
        if not tokens:
            raise bad(line, "no components given for the sample")
        if len(tokens) % width:
            fields = "<ext> <offset> <size> <filename>" if width == 4 else "<ext> <offset> <size>"
            raise bad(line, f"every component must be {fields}, got {lines[line]!r}")
        comps = []
        for k in range(0, len(tokens), width):
            try:
                offset, size = int(tokens[k + 1]), int(tokens[k + 2])
            except ValueError:
                raise bad(line, f"offset and size must be integers, got {lines[line]!r}") from None
            name = tokens[k + 3] if width == 4 else ""
            if offset < 0 or size < 0:
                raise bad(line, f"negative offset or size ({offset}, {size})")
            if offset % BLOCK:
                raise bad(line, f"offset {offset} is not a multiple of the tar block ({BLOCK})")
            if offset + size > tar_size:
                raise DataNotFoundError(
                    f"{who}: index file {index_path!r} line {line}: component {tokens[k]!r} at "
                    f"offset {offset} (size {size}) lies past the end of {tar_path!r} "
                    f"({tar_size} bytes)"
                )
            comps.append((tokens[k], offset, size, name))
        samples.append((comps, line))
    return samples


def _parse_ext(ext, case_sensitive: bool, who: str) -> list[set[str]]:
    entries = [ext] if isinstance(ext, str) else list(ext) if ext is not None else []
    if not entries or not all(isinstance(e, str) for e in entries):
        raise ArgumentError(
            f"{who}: ext={ext!r} must be a string or a list of strings, one per output"
        )
    out = []
    for e in entries:
        alts = {a if case_sensitive else a.lower() for a in e.split(";") if a}
        if not alts:
            raise ArgumentError(f"{who}: ext entry {e!r} names no extension")
        out.append(alts)
    return out


MISSING_BEHAVIORS = ("empty", "skip", "error")


@register
class WebdatasetReader(ShardedReader, Operator):
    """Reads WebDataset samples from tar shards: one output per ``ext`` entry.

    Each output is a component's raw bytes as a 1-D array of its ``dtypes`` entry (uint8 by
    default; the component size must be a multiple of the item size).

    Args:
        paths: the tar file(s) (plain tar, not compressed).
        index_paths: one index file per tar (``dlpipe make-wds-index`` or DALI's ``wds2idx``);
            None builds the index from the tars at construction.
        ext: one entry per output; ``"jpg;png"`` accepts either extension.
        missing_component_behavior: a sample lacking an output's component: ``"empty"``
            (default: an empty output), ``"skip"`` (drop the sample) or ``"error"``.
        case_sensitive_extensions: True by default.
        dtypes: one type per output (``types.UINT8``, ``types.FLOAT``, numpy dtypes, ...).
        shuffle_after_epoch: shuffle the order of the *tar files* every epoch (samples inside a
            tar stay in order), as DALI 2.4 does; forces ``stick_to_shard``.
        shuffle_after_epoch_seed: base seed of that shuffle (default 524287).
        shard_id, num_shards, random_shuffle, initial_fill, stick_to_shard, pad_last_batch,
        prefetch_queue_depth, read_ahead, dont_use_mmap, lazy_init, skip_cached_images,
        tensor_init_bytes: as in ``fn.readers.file`` (no global shuffle: the buffer only).

    Example:
        >>> jpegs, labels = fn.readers.webdataset(
        ...     paths=["shard-0.tar", "shard-1.tar"], ext=["jpg;png", "cls"],
        ...     missing_component_behavior="error", name="Reader")
    """

    schema = "readers.webdataset"
    light = True
    num_inputs = (0, 0)
    num_outputs = 1
    is_random = True
    is_reader = True

    def setup(
        self,
        *,
        paths: Sequence[str] | str | None = None,
        index_paths: Sequence[str] | str | None = None,
        ext: Sequence[str] | str | None = None,
        missing_component_behavior: str = "empty",
        case_sensitive_extensions: bool = True,
        dtypes=None,
        shard_id: int = 0,
        num_shards: int = 1,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        stick_to_shard: bool = False,
        shuffle_after_epoch: bool = False,
        shuffle_after_epoch_seed: int | None = None,
        pad_last_batch: bool = False,
        prefetch_queue_depth: int = 1,
        read_ahead: bool = False,
        dont_use_mmap: bool = False,
        lazy_init: bool = False,
        skip_cached_images: bool = False,
        tensor_init_bytes: int = 1048576,
    ) -> None:
        who = "readers.webdataset"
        self.paths = _as_list(paths, "paths", who)
        if not self.paths:
            raise ArgumentError(f"{who}: paths={paths!r}: give at least one tar file")
        if shuffle_after_epoch and stick_to_shard:
            raise ArgumentError(
                f"{who}: shuffle_after_epoch=True cannot go with stick_to_shard=True"
            )
        self.index_paths = _as_list(index_paths, "index_paths", who)
        if index_paths is not None and len(self.index_paths) != len(self.paths):
            raise ArgumentError(
                f"{who}: index_paths has {len(self.index_paths)} entries but paths has "
                f"{len(self.paths)}"
            )
        behavior = (missing_component_behavior or "empty").lower()
        if behavior not in MISSING_BEHAVIORS:
            raise ArgumentError(
                f"{who}: missing_component_behavior={missing_component_behavior!r} must be one "
                f"of {MISSING_BEHAVIORS}"
            )
        self.case_sensitive = bool(case_sensitive_extensions)
        self.ext = _parse_ext(ext, self.case_sensitive, who)
        n_out = len(self.ext)
        if dtypes is None:
            dtype_list = [np.dtype(np.uint8)] * n_out
        else:
            raw = list(dtypes) if isinstance(dtypes, list | tuple) else [dtypes]
            try:
                dtype_list = [to_numpy_dtype(d) for d in raw]
            except (TypeError, ValueError, KeyError):
                raise ArgumentError(f"{who}: dtypes={dtypes!r} holds an unknown type") from None
            if any(d.kind not in "biuf" for d in dtype_list):
                raise ArgumentError(f"{who}: dtypes={dtypes!r} must be numeric types")
            if len(dtype_list) != n_out:
                raise ArgumentError(
                    f"{who}: dtypes has {len(dtype_list)} entries but ext has {n_out}"
                )
        self.dtypes = dtype_list
        self.num_outputs = n_out
        self.behavior = behavior
        self._build_index(who)
        self._io = PositionalReader(who)
        reorder = None
        if shuffle_after_epoch:  # the tar files' order, as the container readers do it
            tars = np.array([t for t, _, _ in self._samples])
            per_file = [np.flatnonzero(tars == t) for t in range(len(self.paths))]
            seed = DATALOADER_SEED if shuffle_after_epoch_seed is None else shuffle_after_epoch_seed
            reorder = file_order_shuffle(per_file, seed)
        self.loader = ShardedLoader(
            len(self._samples),
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=random_shuffle,
            initial_fill=initial_fill,
            stick_to_shard=bool(stick_to_shard) or shuffle_after_epoch,
            pad_last_batch=pad_last_batch,
            who=f"{who} {self.name or ''}".strip(),
            reorder=reorder,
        )

    def _build_index(self, who: str) -> None:
        ext_outputs: dict[str, list[int]] = {}
        for k, alts in enumerate(self.ext):
            for e in alts:
                ext_outputs.setdefault(e, []).append(k)
        # Per sample: (tar index, per output (offset, size) or None, source info).
        self._samples: list[tuple[int, list[tuple[int, int] | None], str]] = []
        warned = False
        for t, tar in enumerate(self.paths):
            if self.index_paths:
                index = self.index_paths[t]
                listed = read_wds_index(index, tar, who)
                where = lambda line, index=index: f"index file {index!r} line {line}"  # noqa: E731
            else:
                listed = [(comps, 0) for comps in scan_tar(tar, who)]
                where = lambda line, tar=tar: f"tar file {tar!r}"  # noqa: E731
            for comps, line in listed:
                slots: list[tuple[int, int] | None] = [None] * self.num_outputs
                first = None
                for ext, offset, size, name in comps:
                    key = ext if self.case_sensitive else ext.lower()
                    for k in ext_outputs.get(key, ()):
                        if slots[k] is not None:
                            if not warned:
                                warnings.warn(
                                    f"{who}: several components match output {k} at "
                                    f"{where(line)} (sample of {name!r}); the first is used",
                                    stacklevel=2,
                                )
                                warned = True
                            continue
                        if size % self.dtypes[k].itemsize:
                            raise DecodeError(
                                f"{who}: component {name or ext!r} at offset {offset} in "
                                f"{tar!r} ({where(line)}) has {size} bytes, not a multiple of "
                                f"{self.dtypes[k]} ({self.dtypes[k].itemsize} bytes)"
                            )
                        slots[k] = (offset, size)
                        if first is None:
                            first = f"{tar}:{offset}:{name}"
                if any(s is None for s in slots):
                    if self.behavior == "skip":
                        continue
                    if self.behavior == "error":
                        missing = [
                            ";".join(sorted(self.ext[k])) for k, s in enumerate(slots) if s is None
                        ]
                        names = [c[3] or c[0] for c in comps]
                        raise DecodeError(
                            f"{who}: underfull sample at {where(line)} (components {names}, "
                            f"offset {comps[0][1]}): nothing matches ext {missing}"
                        )
                self._samples.append((t, slots, first or f"{tar}:{comps[0][1]}:{comps[0][3]}"))
        if not self._samples:
            raise DataNotFoundError(
                f"{who}: no samples in {self.paths!r} (ext={[sorted(e) for e in self.ext]}, "
                f"missing_component_behavior={self.behavior!r})"
            )

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs

    def source_info(self, param: int) -> str:
        return self._samples[param][2]

    def run_sample(self, inputs, args, param):
        t, slots, _ = self._samples[param]
        path = self.paths[t]
        outs = []
        for k, slot in enumerate(slots):
            if slot is None:
                outs.append(np.empty(0, dtype=self.dtypes[k]))
            else:
                outs.append(self._io.read(path, *slot).view(self.dtypes[k]))
        return tuple(outs)
