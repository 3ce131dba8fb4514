"""``fn.readers.numpy``: arrays from ``.npy`` files, with an optional region of interest.

The ``.npy`` header (format versions 1-3) is parsed here; the data is memory-mapped (only the
ROI's pages are touched) or, with ``dont_use_mmap=True``, read with plain reads. Fortran-order
arrays come out in C order with numpy's shape, i.e. exactly ``np.load(path)`` made contiguous.
Files are listed, sharded and shuffled as in ``fn.readers.file`` (including the one-off global
shuffle of ``random_shuffle`` and ``shuffle_after_epoch``); there is no label output.

``device="gpu"``: the files are read (and their ROI cut) on the host exactly as on the CPU, and
each batch goes to the GPU in one copy through pinned memory (the ``_copy_to_gpu`` operator
behind ``DataNode.gpu()``). DALI's GPU numpy reader reads with GPUDirect Storage (cuFile)
straight into GPU memory where the file system allows it; that path is not implemented here,
so its outputs are the same but the bytes pass through host memory.
"""

from __future__ import annotations

import ast
import fnmatch
import math
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ArgumentError, DataNotFoundError, DecodeError
from ..graph import Operator, register
from ._sharding import ListSharding, ShardedReader

MAGIC = b"\x93NUMPY"
POLICIES = ("error", "pad", "trim_to_shape")
ROI_START = ("roi_start", "rel_roi_start")
ROI_END = ("roi_end", "rel_roi_end", "roi_shape", "rel_roi_shape")
ROI_ARGS = ROI_START + ROI_END


@dataclass(frozen=True)
class NpyHeader:
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def read_npy_header(path: str) -> NpyHeader:
    """Parse the header of the ``.npy`` file at ``path``.

    Raises:
        DataNotFoundError: the file cannot be opened.
        DecodeError: not a ``.npy`` file, an unsupported version or dtype, or data cut short.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            size = os.fstat(f.fileno()).st_size
            if len(head) < 10 or head[:6] != MAGIC:
                raise DecodeError(f"readers.numpy: {path!r} is not a .npy file (bad magic)")
            major = head[6]
            if major == 1:
                (hlen,), start = struct.unpack_from("<H", head, 8), 10
            elif major in (2, 3):
                if len(head) < 12:
                    raise DecodeError(f"readers.numpy: {path!r}: truncated .npy header")
                (hlen,), start = struct.unpack_from("<I", head, 8), 12
            else:
                raise DecodeError(f"readers.numpy: {path!r}: unsupported .npy version {major}")
            f.seek(start)
            text = f.read(hlen)
    except OSError as e:
        raise DataNotFoundError(f"readers.numpy: cannot read {path!r}: {e}") from None
    if len(text) < hlen:
        raise DecodeError(f"readers.numpy: {path!r}: truncated .npy header")
    try:
        meta = ast.literal_eval(text.decode("utf-8" if major == 3 else "latin1"))
        dtype = np.lib.format.descr_to_dtype(meta["descr"])
        shape = tuple(int(d) for d in meta["shape"])
        fortran = bool(meta["fortran_order"])
    except (ValueError, SyntaxError, KeyError, TypeError) as e:
        raise DecodeError(f"readers.numpy: {path!r}: malformed .npy header ({e})") from None
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise DecodeError(
            f"readers.numpy: {path!r}: unsupported dtype {dtype} (plain numbers only)"
        )
    header = NpyHeader(dtype, shape, fortran, start + hlen)
    if size < header.data_offset + header.nbytes:
        raise DecodeError(
            f"readers.numpy: {path!r} is truncated: shape {shape} of {dtype} needs "
            f"{header.nbytes} bytes at offset {header.data_offset}, the file has "
            f"{max(size - header.data_offset, 0)}"
        )
    return header


def list_npy_root(root: str, file_filter: str) -> list[str]:
    """Files in ``root`` matching ``file_filter``, then those of each immediate subdirectory
    (DALI's ``discover_files`` without labels); names sorted bytewise."""
    if not os.path.isdir(root):
        raise DataNotFoundError(f"readers.numpy: file_root={root!r} is not a directory")

    def files_in(d: str) -> list[str]:
        with os.scandir(d) as it:
            return sorted(
                e.name for e in it if e.is_file() and fnmatch.fnmatchcase(e.name, file_filter)
            )

    with os.scandir(root) as it:
        subdirs = sorted(e.name for e in it if e.is_dir())
    out = files_in(root)
    for sub in subdirs:
        out += [f"{sub}/{n}" for n in files_in(os.path.join(root, sub))]
    return out


def _llround(x: float) -> int:
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _vector(value, name: str, who: str, cast) -> list | None:
    if value is None:
        return None
    arr = np.atleast_1d(np.asarray(value))
    if arr.ndim != 1 or arr.dtype.kind not in "iuf":
        raise ArgumentError(f"{who}: {name}={value!r} must be a number or a list of numbers")
    return [cast(v) for v in arr.tolist()]


@register(legacy=("NumpyReader",))
class NumpyReader(ShardedReader, Operator):
    """Reads arrays from ``.npy`` files (one output; its dtype and shape come from the file).

    Give the files as ``file_root`` (with ``file_filter``: files in the root and in its
    immediate subdirectories), ``file_list`` (one name per line) or ``files``.

    The region of interest: a start (``roi_start`` absolute, or ``rel_roi_start`` as a fraction
    of the extent) and an end (``roi_end`` / ``rel_roi_end``, or a size ``roi_shape`` /
    ``rel_roi_shape``), over ``roi_axes`` (all axes when empty), in the C-order output layout.
    Coordinates are rounded half away from zero. ``out_of_bounds_policy``: "error" (default),
    "pad" (with ``fill_value``) or "trim_to_shape". The ROI arguments may be per-sample inputs.

    Args:
        file_root, file_list, files, file_filter ("*.npy"), shuffle_after_epoch,
        shuffle_after_epoch_seed: the listing and its shuffles, as in ``fn.readers.file``.
        roi_start, rel_roi_start, roi_end, rel_roi_end, roi_shape, rel_roi_shape, roi_axes,
        out_of_bounds_policy, fill_value (0): the region of interest.
        cache_header_information: keep each file's parsed header (False).
        use_o_direct: accepted (needs ``dont_use_mmap=True``); plain reads are used.
        dont_use_mmap: read the data with ``read()`` instead of mapping the file.
        shard_id, num_shards, random_shuffle, initial_fill, stick_to_shard, pad_last_batch,
        prefetch_queue_depth, read_ahead, lazy_init, skip_cached_images, tensor_init_bytes,
        register_buffers: as in ``fn.readers.file``.

    ``device="gpu"`` gives the batch on the GPU (read on the host, one upload per batch; see the
    module docstring about DALI's GPUDirect Storage path).

    Example:
        >>> volumes = fn.readers.numpy(file_root="/data/ct", rel_roi_start=(0.25, 0.25),
        ...                            rel_roi_shape=(0.5, 0.5), roi_axes=(1, 2), name="Reader")

    Every sample of a batch must have the same dtype and number of dimensions (as in DALI);
    the headers are read when the batch is formed, so a mixed batch fails naming both files.
    """

    schema = "readers.numpy"
    devices = ("cpu", "gpu")
    light = True
    num_inputs = (0, 0)
    num_outputs = 1
    is_random = True
    is_reader = True
    arg_inputs = frozenset(ROI_ARGS)

    def setup(
        self,
        *,
        file_root: str | None = None,
        file_list: str | None = None,
        files: Sequence[str] | str | None = None,
        file_filter: str = "*.npy",
        roi_start=None,
        rel_roi_start=None,
        roi_end=None,
        rel_roi_end=None,
        roi_shape=None,
        rel_roi_shape=None,
        roi_axes: Sequence[int] | int = (),
        out_of_bounds_policy: str = "error",
        fill_value: float = 0.0,
        cache_header_information: bool = False,
        use_o_direct: bool = False,
        register_buffers: bool = True,
        shard_id: int = 0,
        num_shards: int = 1,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        shuffle_after_epoch: bool = False,
        shuffle_after_epoch_seed: int | None = None,
        stick_to_shard: bool | None = None,
        pad_last_batch: bool = False,
        prefetch_queue_depth: int = 1,
        read_ahead: bool = False,
        dont_use_mmap: bool = False,
        lazy_init: bool = False,
        skip_cached_images: bool = False,
        tensor_init_bytes: int = 1048576,
    ) -> None:
        who = "readers.numpy"
        self.who = who
        # device="gpu": this node reads on the host (CPU stage); after_call() adds the upload.
        self.out_device = self.device
        self.device = "cpu"
        if files is not None and file_list is not None:
            raise ArgumentError(f"{who}: give either files= or file_list=, not both")
        if files is None and file_list is None and file_root is None:
            raise ArgumentError(f"{who}: give file_root=, file_list= or files=")
        if use_o_direct and not dont_use_mmap:
            raise ArgumentError(f"{who}: use_o_direct=True needs dont_use_mmap=True")
        if out_of_bounds_policy not in POLICIES:
            raise ArgumentError(
                f"{who}: out_of_bounds_policy={out_of_bounds_policy!r} must be one of {POLICIES}"
            )

        if files is not None:
            names = [files] if isinstance(files, str) else [os.fspath(f) for f in files]
            base = file_root or ""
        elif file_list is not None:
            if not os.path.isfile(file_list):
                raise DataNotFoundError(f"{who}: file_list={file_list!r} does not exist")
            with open(file_list, encoding="utf-8") as f:
                names = [line.strip() for line in f if line.strip()]
            base = file_root if file_root is not None else os.path.dirname(file_list)
        else:
            names = list_npy_root(file_root, file_filter)
            base = file_root
        if not names:
            raise DataNotFoundError(f"{who}: No files found in {file_root or file_list or files!r}")
        self.files = names
        self.paths = [os.path.join(base, n) for n in names]

        # ROI: static values now, per-sample ones (DataNodes) arrive in run_sample's args.
        self._roi = {
            name: _vector(
                value, name, who, int if name in ("roi_start", "roi_end", "roi_shape") else float
            )
            for name, value in zip(
                ROI_ARGS,
                (roi_start, rel_roi_start, roi_end, rel_roi_end, roi_shape, rel_roi_shape),
                strict=True,
            )
            if value is not None
        }
        self._check_roi_names(self._roi)
        axes = _vector(roi_axes, "roi_axes", who, int) or []
        if len(set(axes)) != len(axes):
            raise ArgumentError(f"{who}: roi_axes={roi_axes!r} repeats an axis")
        self.roi_axes = axes
        if axes:
            for name, vals in self._roi.items():
                if len(vals) != len(axes):
                    raise ArgumentError(
                        f"{who}: {name}={vals} has {len(vals)} values but roi_axes={axes} has "
                        f"{len(axes)}"
                    )
        self.policy = out_of_bounds_policy
        self.fill_value = float(fill_value)
        self.dont_use_mmap = bool(dont_use_mmap)
        self._headers: dict[str, NpyHeader] | None = {} if cache_header_information else None

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

    def after_call(self, outputs):
        if self.out_device != "gpu":
            return outputs
        return [outputs[0].gpu()]

    def _check_roi_names(self, roi: dict) -> None:
        if sum(n in roi for n in ROI_START) > 1:
            raise ArgumentError(f"{self.who}: roi_start and rel_roi_start are mutually exclusive")
        if sum(n in roi for n in ROI_END) > 1:
            raise ArgumentError(
                f"{self.who}: roi_end, rel_roi_end, roi_shape and rel_roi_shape are mutually "
                f"exclusive; got {[n for n in ROI_END if n in roi]}"
            )

    # --- the sharded stream (ShardedReader), with each file's header --------------------------
    def batch_params(self, n: int) -> list[tuple[int, NpyHeader]]:
        indices = self.loader.next_batch(n)
        # The headers are read here (small reads) so that a batch mixing dtypes or ranks fails
        # with both file names, as in DALI.
        params = [(i, self.header(self.paths[i])) for i in indices]
        i0, h0 = params[0]
        for i, h in params[1:]:
            if h.dtype.newbyteorder("=") != h0.dtype.newbyteorder("="):
                raise DecodeError(
                    f"{self.who}: all samples of a batch must have the same dtype; got "
                    f"{self.paths[i0]!r} of {h0.dtype} and {self.paths[i]!r} of {h.dtype}"
                )
            if len(h.shape) != len(h0.shape):
                raise DecodeError(
                    f"{self.who}: all samples of a batch must have the same number of "
                    f"dimensions; got {self.paths[i0]!r} with {len(h0.shape)} and "
                    f"{self.paths[i]!r} with {len(h.shape)}"
                )
        return params

    def source_info(self, param: tuple[int, NpyHeader]) -> str:
        return self.files[param[0]]

    # --- per sample -------------------------------------------------------------------------
    def header(self, path: str) -> NpyHeader:
        if self._headers is None:
            return read_npy_header(path)
        h = self._headers.get(path)
        if h is None:
            h = self._headers[path] = read_npy_header(path)
        return h

    def _load(self, path: str, h: NpyHeader) -> np.ndarray:
        """The whole array, numpy's logical shape (a lazy memmap or a read buffer)."""
        order = "F" if h.fortran_order else "C"
        if h.nbytes == 0:
            return np.empty(h.shape, dtype=h.dtype)
        if not self.dont_use_mmap:
            return np.memmap(
                path, dtype=h.dtype, mode="r", offset=h.data_offset, shape=h.shape, order=order
            )
        buf = np.empty(h.nbytes, dtype=np.uint8)
        try:
            with open(path, "rb") as f:
                f.seek(h.data_offset)
                got = f.readinto(memoryview(buf))
        except OSError as e:
            raise DataNotFoundError(f"{self.who}: cannot read {path!r}: {e}") from None
        if got != h.nbytes:
            raise DecodeError(
                f"{self.who}: {path!r} is truncated: {got} of {h.nbytes} data bytes at offset "
                f"{h.data_offset}"
            )
        return buf.view(h.dtype).reshape(h.shape, order=order)

    def roi_window(
        self, shape: tuple[int, ...], roi: dict, path: str
    ) -> tuple[list[int], list[int]] | None:
        """(anchor, size) per axis from the ROI arguments, or None without any."""
        if not roi:
            return None
        ndim = len(shape)
        axes = [a + ndim if a < 0 else a for a in self.roi_axes] or list(range(ndim))
        if any(not 0 <= a < ndim for a in axes):
            raise ArgumentError(
                f"{self.who}: roi_axes={self.roi_axes} out of range for {path!r} of shape {shape}"
            )
        for name, vals in roi.items():
            if len(vals) != len(axes):
                raise ArgumentError(
                    f"{self.who}: {name}={vals} has {len(vals)} values; {path!r} of shape "
                    f"{shape} needs {len(axes)} (one per roi_axes entry or per dimension)"
                )
        anchor, size = [0] * ndim, list(shape)
        for i, d in enumerate(axes):
            extent = shape[d]
            start = 0.0
            if "roi_start" in roi:
                start = float(roi["roi_start"][i])
            elif "rel_roi_start" in roi:
                start = roi["rel_roi_start"][i] * extent
            end = float(extent)
            if "roi_end" in roi:
                end = float(roi["roi_end"][i])
            elif "rel_roi_end" in roi:
                end = roi["rel_roi_end"][i] * extent
            elif "roi_shape" in roi:
                end = start + roi["roi_shape"][i]
            elif "rel_roi_shape" in roi:
                if "rel_roi_start" in roi:  # one multiplication after the sum, as DALI
                    end = (roi["rel_roi_start"][i] + roi["rel_roi_shape"][i]) * extent
                else:
                    end = start + roi["rel_roi_shape"][i] * extent
            if end < start:
                raise ArgumentError(
                    f"{self.who}: ROI end {end} before its start {start} on axis {d} of {path!r}"
                )
            anchor[d] = _llround(start)
            size[d] = _llround(end) - anchor[d]
        return anchor, size

    def run_sample(self, inputs, args, param):
        index, h = param
        path = self.paths[index]
        roi = dict(self._roi)
        if args:
            for name, value in args.items():
                cast = float if name.startswith("rel_") else int
                roi[name] = _vector(value, name, self.who, cast)
            self._check_roi_names(roi)
        arr = self._load(path, h)
        window = self.roi_window(h.shape, roi, path)
        if window is not None:
            arr = self._slice(arr, *window, path)
        out = np.array(arr, order="C", copy=True)
        if not out.dtype.isnative:
            out = out.astype(out.dtype.newbyteorder("="))
        return out

    def _slice(self, arr: np.ndarray, anchor: list[int], size: list[int], path: str):
        shape = arr.shape
        inside = all(a >= 0 and a + s <= n for a, s, n in zip(anchor, size, shape, strict=True))
        if inside:
            return arr[tuple(slice(a, a + s) for a, s in zip(anchor, size, strict=True))]
        if self.policy == "error":
            raise ArgumentError(
                f"{self.who}: the ROI (anchor {anchor}, shape {size}) reaches outside {path!r} "
                f"of shape {list(shape)}; use out_of_bounds_policy='pad' or 'trim_to_shape'"
            )
        if self.policy == "trim_to_shape":
            lo = [min(max(a, 0), n) for a, n in zip(anchor, shape, strict=True)]
            hi = [min(max(a + s, 0), n) for a, s, n in zip(anchor, size, shape, strict=True)]
            return arr[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]
        fill = self.fill_value
        if arr.dtype.kind in "iu":
            info = np.iinfo(arr.dtype)
            fill = min(max(round(fill), info.min), info.max)
        elif arr.dtype.kind == "b":
            fill = bool(fill)
        out = np.full(size, fill, dtype=arr.dtype)
        src, dst = [], []
        for a, s, n in zip(anchor, size, shape, strict=True):
            lo, hi = max(a, 0), min(a + s, n)
            if hi <= lo:
                return out
            src.append(slice(lo, hi))
            dst.append(slice(lo - a, hi - a))
        out[tuple(dst)] = arr[tuple(src)]
        return out
