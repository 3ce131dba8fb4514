"""``dlpipe inspect DATA_DIR``: what ``fn.readers.file(file_root=DATA_DIR)`` would read.

Files and classes as the reader lists them, formats by magic bytes, byte sizes, image
dimensions from the headers (JPEG, PNG, GIF, BMP, WebP; a CPU decode for the rest), corrupt
files (with ``check=True`` every file is decoded with the CPU decoder), and how the data set
splits over N shards (DALI's shard formula, padding, batches per epoch).

    >>> from dlpipe.inspect_data import inspect_dataset, format_report
    >>> report = inspect_dataset("/data/train", shards=8, batch=256, check=True)
    >>> print(format_report(report))
"""

from __future__ import annotations

import math
import os
import struct
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cv2
import numpy as np

from .errors import ArgumentError, DecodeError
from .readers._sharding import initial_order, padded_shard_size, shard_size, shard_start
from .readers.file import KNOWN_EXTENSIONS, list_file_root

__all__ = ["format_report", "image_format", "image_size", "inspect_dataset"]

_HEAD = 64 * 1024  # enough for a JPEG's SOF after an EXIF block in nearly every file


def image_format(head: bytes) -> str:
    """The format named by the first bytes of a file (``"unknown"`` if none matches)."""
    if head[:3] == b"\xff\xd8\xff":
        return "JPEG"
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if head[:2] == b"BM":
        return "BMP"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "TIFF"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    if head[:12] == b"\x00\x00\x00\x0cjP  \r\n\x87\n" or head[:4] == b"\xff\x4f\xff\x51":
        return "JPEG 2000"
    if len(head) >= 2 and head[0:1] == b"P" and head[1:2] in b"123456":
        return "PNM"
    if head[:4] == b"fLaC":
        return "FLAC"
    if head[:4] == b"OggS":
        return "Ogg"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "WAV"
    return "unknown"


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", head[i + 2 : i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", head[i + 5 : i + 9])
            return h, w
        i += 2 + length
    return None


def image_size(head: bytes, fmt: str | None = None) -> tuple[int, int] | None:
    """(height, width) read from the header bytes, or None where the header does not say
    (a format parsed here only: JPEG, PNG, GIF, BMP, WebP)."""
    fmt = fmt or image_format(head)
    try:
        if fmt == "JPEG":
            return _jpeg_size(head)
        if fmt == "PNG" and head[12:16] == b"IHDR":
            w, h = struct.unpack(">II", head[16:24])
            return h, w
        if fmt == "GIF":
            w, h = struct.unpack("<HH", head[6:10])
            return h, w
        if fmt == "BMP":
            w, h = struct.unpack("<ii", head[18:26])
            return abs(h), w
        if fmt == "WebP":
            kind = head[12:16]
            if kind == b"VP8 ":
                w, h = struct.unpack("<HH", head[26:30])
                return h & 0x3FFF, w & 0x3FFF
            if kind == b"VP8L":
                b = int.from_bytes(head[21:25], "little")
                return ((b >> 14) & 0x3FFF) + 1, (b & 0x3FFF) + 1
            if kind == b"VP8X":
                w = int.from_bytes(head[24:27], "little") + 1
                h = int.from_bytes(head[27:30], "little") + 1
                return h, w
    except struct.error:
        return None
    return None


def _probe(path: str, check: bool) -> dict[str, Any]:
    """Size, format, dimensions and (``check``) decode result of one file, read once."""
    info: dict[str, Any] = {"bytes": 0, "format": "unknown", "hw": None, "error": None}
    try:
        f = open(path, "rb")
    except OSError as e:
        info["error"] = f"cannot read: {e}"
        return info
    with f:
        try:
            info["bytes"] = size = os.fstat(f.fileno()).st_size
            data = f.read() if check else f.read(_HEAD)
        except OSError as e:
            info["error"] = f"cannot read: {e}"
            return info
        if size == 0:
            info["error"] = "empty file (0 bytes)"
            return info
        info["format"] = fmt = image_format(data[:16])
        info["hw"] = image_size(data, fmt)
        # A format without a header parser here: decode it (the rest of the file is needed).
        decode = info["hw"] is None and fmt not in ("unknown", "FLAC", "Ogg", "WAV")
        if decode and not check:
            data += f.read()
    if check:
        from .decoders.image import decode_cpu
        from .types import DALIImageType

        try:
            img = decode_cpu(np.frombuffer(data, np.uint8), DALIImageType.RGB)
            info["hw"] = info["hw"] or img.shape[:2]
        except DecodeError as e:
            info["error"] = str(e).removeprefix("decoders.image: ")
    elif decode:
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        info["hw"] = None if img is None else img.shape[:2]
    return info


def _stats(values: list[int]) -> dict[str, float] | None:
    if not values:
        return None
    a = np.asarray(values, dtype=np.float64)
    return {
        "min": float(a.min()),
        "median": float(np.median(a)),
        "mean": float(a.mean()),
        "max": float(a.max()),
        "total": float(a.sum()),
    }


def sharding_plan(
    n: int, shards: int, batch: int, labels: list[int] | None = None
) -> dict[str, Any]:
    """How ``n`` samples split over ``shards`` readers with batches of ``batch``.

    Per shard: start, size (DALI: ``floor(n*(i+1)/S) - floor(n*i/S)``), padding added by
    ``pad_last_batch=True`` (up to ``ceil(n/S)``) and, given ``labels`` in file order, the
    classes the shard holds without shuffling and with ``random_shuffle=True`` (the reader
    shuffles the file list once, with a fixed seed, before sharding).
    """
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ArgumentError(f"inspect: shards={shards!r} must be an integer >= 1")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ArgumentError(f"inspect: batch={batch!r} must be an integer >= 1")
    if n < shards:
        raise ArgumentError(f"inspect: shards={shards} is larger than the data set ({n} files)")
    padded = padded_shard_size(n, shards)
    lab = np.asarray(labels) if labels is not None else None
    shuffled = None
    if lab is not None:
        order = initial_order(n)
        shuffled = lab[order]
    rows = []
    for i in range(shards):
        start, size = shard_start(n, i, shards), shard_size(n, i, shards)
        row = {"shard": i, "start": start, "size": size, "padding": padded - size}
        if lab is not None:
            row["classes"] = len(np.unique(lab[start : start + size]))
            row["classes_shuffled"] = len(np.unique(shuffled[start : start + size]))
        rows.append(row)
    return {
        "num_shards": shards,
        "batch": batch,
        "epoch_size": n,
        "epoch_size_padded": padded * shards,
        "padded_shard_size": padded,
        "batches_fill": math.ceil(padded / batch),
        "batches_drop": (n // shards) // batch,
        "shards": rows,
    }


def inspect_dataset(
    root: str,
    shards: int = 1,
    batch: int = 256,
    check: bool = False,
    threads: int | None = None,
    progress=None,
) -> dict[str, Any]:
    """Inspect ``root`` as ``fn.readers.file(file_root=root)`` would read it.

    Args:
        root: a folder of class subfolders.
        shards: the number of ranks (``num_shards``) to plan for.
        batch: the per-rank batch size, for batches per epoch.
        check: decode every file with the CPU decoder and report those that fail.
        threads: reader/decoder threads (default: the CPU count).
        progress: optional ``progress(done, total)`` callback.

    Returns:
        A dict: ``root``, ``files``, ``classes`` (name, label, count), ``ignored`` (files
        the reader's filters leave out), ``formats``, ``extension_mismatch``, ``bytes`` and
        ``height``/``width`` statistics, ``corrupt`` (file, error), ``checked`` and
        ``sharding`` (see :func:`sharding_plan`).

    Raises:
        DataNotFoundError: ``root`` is not a directory or holds no readable files.
        ArgumentError: bad ``shards`` or ``batch``.
    """
    from .errors import DataNotFoundError

    files, labels = list_file_root(root, list(KNOWN_EXTENSIONS), None, False)
    if not files:
        raise DataNotFoundError(
            f"inspect: no files that fn.readers.file reads in {root!r} (class subfolders of "
            f"{', '.join(e[2:] for e in KNOWN_EXTENSIONS[:5])}, ... files)"
        )
    plan = sharding_plan(len(files), shards, batch, labels)
    with os.scandir(root) as it:
        subdirs = sorted(e.name for e in it if e.is_dir())
    counts = Counter(labels)
    classes = [{"name": d, "label": i, "files": counts.get(i, 0)} for i, d in enumerate(subdirs)]
    listed = set(files)
    ignored = []
    for d in subdirs:
        with os.scandir(os.path.join(root, d)) as it:
            ignored += [f"{d}/{e.name}" for e in it if f"{d}/{e.name}" not in listed]
    with os.scandir(root) as it:
        ignored += sorted(e.name for e in it if e.is_file() and not e.name.startswith("."))

    paths = [os.path.join(root, f) for f in files]
    results: list[dict[str, Any]] = [None] * len(paths)  # type: ignore[list-item]
    with ThreadPoolExecutor(threads or os.cpu_count() or 1) as pool:
        for k, info in enumerate(pool.map(lambda p: _probe(p, check), paths, chunksize=16)):
            results[k] = info
            if progress is not None and ((k + 1) % 64 == 0 or k + 1 == len(paths)):
                progress(k + 1, len(paths))

    formats = Counter(r["format"] for r in results if r["bytes"])
    ext_of = {
        "JPEG": (".jpg", ".jpeg"),
        "PNG": (".png",),
        "BMP": (".bmp",),
        "GIF": (".gif",),
        "TIFF": (".tif", ".tiff"),
        "WebP": (".webp",),
    }
    mismatch = [
        f
        for f, r in zip(files, results, strict=True)
        if r["format"] in ext_of and not f.lower().endswith(ext_of[r["format"]])
    ]
    corrupt = []
    for f, r in zip(files, results, strict=True):
        if r["error"] is not None:
            corrupt.append({"file": f, "error": r["error"]})
        elif r["format"] == "unknown" and not check:
            corrupt.append({"file": f, "error": "unknown format (no image magic bytes)"})
    dims = [r["hw"] for r in results if r["hw"] is not None]
    return {
        "root": root,
        "files": len(files),
        "classes": classes,
        "ignored": ignored,
        "formats": dict(formats.most_common()),
        "extension_mismatch": mismatch,
        "bytes": _stats([r["bytes"] for r in results]),
        "height": _stats([h for h, _ in dims]),
        "width": _stats([w for _, w in dims]),
        "with_dimensions": len(dims),
        "corrupt": corrupt,
        "checked": check,
        "sharding": plan,
    }


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


def format_report(r: dict[str, Any], max_rows: int = 10) -> str:
    """The report of :func:`inspect_dataset` as text."""
    out = [f"data set: {r['root']}"]
    out.append(
        f"files: {r['files']:,} in {len(r['classes'])} classes"
        + (
            f" ({len(r['ignored'])} other files not read by fn.readers.file)"
            if r["ignored"]
            else ""
        )
    )
    cls = r["classes"]
    counts = [c["files"] for c in cls]
    out.append(
        f"classes: label 0..{len(cls) - 1}, files per class min {min(counts):,} / "
        f"max {max(counts):,}"
    )
    shown = cls if len(cls) <= max_rows else cls[: max_rows // 2] + [None] + cls[-max_rows // 2 :]
    for c in shown:
        out.append("  ..." if c is None else f"  {c['label']:>5}  {c['name']}  ({c['files']:,})")
    if r["ignored"]:
        out.append(f"not read (extension filter or outside class folders): {r['ignored'][:5]}")
    out.append("formats: " + ", ".join(f"{k} {v:,}" for k, v in r["formats"].items()))
    if r["extension_mismatch"]:
        out.append(
            f"extension does not match the content: {len(r['extension_mismatch'])} files, "
            f"e.g. {r['extension_mismatch'][:3]} (decoders read the content, not the name)"
        )
    b = r["bytes"]
    out.append(
        f"bytes: total {_human(b['total'])}, per file min {_human(b['min'])}, median "
        f"{_human(b['median'])}, mean {_human(b['mean'])}, max {_human(b['max'])}"
    )
    if r["height"] is not None:
        h, w = r["height"], r["width"]
        out.append(
            f"image size ({r['with_dimensions']:,} files): height {h['min']:.0f}-{h['max']:.0f} "
            f"(median {h['median']:.0f}), width {w['min']:.0f}-{w['max']:.0f} "
            f"(median {w['median']:.0f})"
        )
    what = "decoded every file" if r["checked"] else "headers only; --check decodes every file"
    out.append(f"corrupt: {len(r['corrupt'])} ({what})")
    for c in r["corrupt"][:max_rows]:
        out.append(f"  {c['file']}: {c['error']}")
    if len(r["corrupt"]) > max_rows:
        out.append(f"  ... and {len(r['corrupt']) - max_rows} more")
    s = r["sharding"]
    out.append(
        f"sharding over {s['num_shards']} ranks (num_shards={s['num_shards']}, batch "
        f"{s['batch']}): shard i = files [floor(N*i/S), floor(N*(i+1)/S)), N={s['epoch_size']:,}"
    )
    out.append("  shard      start       size  +padding  classes  classes(random_shuffle)")
    rows = s["shards"]
    shown = rows if len(rows) <= max_rows else rows[: max_rows // 2] + [None] + rows[-2:]
    for x in shown:
        if x is None:
            out.append("  ...")
            continue
        out.append(
            f"  {x['shard']:>5} {x['start']:>10,} {x['size']:>10,} {x['padding']:>9,} "
            f"{x['classes']:>8,} {x['classes_shuffled']:>8,}"
        )
    out.append(
        f"  pad_last_batch=True: every shard {s['padded_shard_size']:,} samples "
        f"(epoch_size_padded {s['epoch_size_padded']:,}); batches per epoch: "
        f"{s['batches_fill']:,} (FILL/PARTIAL), {s['batches_drop']:,} (DROP)"
    )
    if s["num_shards"] > 1 and any(x["classes"] < len(cls) for x in rows):
        out.append(
            "  without random_shuffle each shard holds a contiguous run of classes; "
            "random_shuffle=True mixes them (one global shuffle, the same on every rank)"
        )
    return "\n".join(out)
