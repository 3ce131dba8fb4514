"""GPU launchers of the speech operators (``audio.cu``): one launch per batch and step.

The spectrogram frames every sample's windows into one (windows, nfft) buffer, transforms it
with batched cuFFT R2C plans of fixed sizes (:func:`rfft_rows`) and writes each sample's power
spectrum in its layout. Mel filter banks and DCTs (mfcc) are a matrix applied along one axis
of every sample. The operators do the host-side checks and shape arithmetic and pass plain
values here.
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from . import ctype, get_function, stream_scoped, upload
from ._batch import alloc_batch, as_samples, device_empty, round_up_eighth, sample_list

PREEMPH_DESC = np.dtype([("in_ptr", "<i8"), ("out_ptr", "<i8"), ("n", "<i8"), ("coeff", "<f8")])
FRAMES_DESC = np.dtype([(f, "<i8") for f in ("in_ptr", "length", "first_frame", "nwin")])
SPEC_DESC = np.dtype([(f, "<i8") for f in ("out_ptr", "first_frame", "nwin")])
AXIS_DESC = np.dtype(
    [(f, "<i8") for f in ("in_ptr", "out_ptr", "outer", "n", "inner", "nout", "table_ptr")]
)
FLAT_DESC = np.dtype([(f, "<i8") for f in ("in_ptr", "out_ptr", "n")])
RESAMPLE_DESC = np.dtype(
    [(f, "<i8") for f in ("in_ptr", "out_ptr", "n_in", "n_out", "channels")] + [("scale", "<f8")]
)

_BLOCK = 256
_MAX_BLOCKS = 1024  # per sample along x; the kernels loop over the rest
_NULL = np.uint64(0)  # a null pointer argument
PADDING = {"none": 0, "zero": 1, "reflect": 2}
BORDERS = {"zero": 0, "clamp": 1, "reflect": 2}


def _blocks(n: int, block: int = _BLOCK) -> int:
    return int(min(_MAX_BLOCKS, max(1, -(-int(n) // block))))


def contiguous(inputs):
    """The batch as a SampleList of C-contiguous samples (copied when strided).

    A batch found C-contiguous is marked so (``_c_order``; a SampleList's arrays are never
    changed in place), as are ``alloc_batch``'s ragged outputs: the speech operators check
    their input and their launchers check it again, 7 checks of ragged batches per Jasper
    batch on the GPU stage's thread, each ~15 us, where one (the dithered audio) is left."""
    s = as_samples(inputs)
    if len(s) == 0 or getattr(s, "_c_order", False):
        return s
    want = np.ones_like(s.shapes)
    if s.shapes.shape[1] > 1:
        want[:, :-1] = np.cumprod(s.shapes[:, :0:-1], axis=1)[:, ::-1]
    if (s.strides == want).all():
        s._c_order = True
        return s
    import cupy

    return sample_list().from_arrays([cupy.ascontiguousarray(a) for a in s], s.device_id)


@functools.cache
def _device_table(device_id: int, key: bytes, dtype: str, shape: tuple):
    """A small constant array (window, filter matrix, DCT table) on the device, made once."""
    import cupy

    with cupy.cuda.Device(device_id):
        return cupy.asarray(np.frombuffer(key, dtype).reshape(shape))


def device_table(arr: np.ndarray, device_id: int):
    arr = np.ascontiguousarray(arr)
    return _device_table(device_id, arr.tobytes(), arr.dtype.str, arr.shape)


# --- preemphasis -----------------------------------------------------------------------------


@stream_scoped
def preemphasis_batch(inputs, coeffs, border: str, out_dtype, stream=None):
    """``out[i] = in[i] - coeff * in[i - 1]`` per sample (flat), ``in[-1]`` by ``border``;
    float arithmetic (double for float64 input), integers rounded to nearest and saturated."""
    s = contiguous(inputs)
    n = len(s)
    out = alloc_batch(s.shapes, out_dtype, s.device_id)
    if n == 0:
        return out
    sizes = s.shapes.prod(axis=1)
    d = np.zeros(n, PREEMPH_DESC)
    d["in_ptr"], d["out_ptr"], d["n"] = s.ptrs.view(np.int64), out.ptrs.view(np.int64), sizes
    d["coeff"] = np.asarray(coeffs, np.float64)
    acc = "double" if s.dtype == np.float64 else "float"
    expr = f"preemphasis<{ctype(s.dtype)}, {ctype(out_dtype)}, {acc}>"
    k = get_function("audio.cu", expr, s.device_id)
    dev = upload(d, stream)
    k((_blocks(sizes.max()), 1, n), (_BLOCK, 1, 1), (dev, np.int32(BORDERS[border])), stream=stream)
    return out


# --- spectrogram -----------------------------------------------------------------------------


FFT_CHUNK_FLOATS = 1 << 21  # frames per cuFFT execution of a large batch: 8 MiB of float32
_PLANS: dict = {}  # (device, nfft, rows) -> (cuFFT R2C plan, its lock)
_PLANS_LOCK = threading.Lock()


def fft_chunk(nfft: int) -> int:
    """Rows per cuFFT execution of a large batch of ``nfft``-point frames (4,096 at 512)."""
    return max(1, FFT_CHUNK_FLOATS // nfft)


def fft_rows(total: int, nfft: int) -> int:
    """The rows the frames buffer of ``total`` windows gets: a multiple of
    :func:`fft_chunk` when there are more, else ``total`` rounded up to one of 8 sizes per
    octave (at most 1/8 more). The rows past ``total`` are transformed and never read."""
    chunk = fft_chunk(nfft)
    if total > chunk:
        return -(-int(total) // chunk) * chunk
    return round_up_eighth(total)


def rfft_rows(frames, out, device_id: int) -> None:
    """``out[i] = rfft(frames[i])`` for every row (``frames``: (rows, nfft) float32 from
    :func:`fft_rows`; ``out``: (rows, nfft // 2 + 1) complex64) on the current stream, by
    plans of :func:`fft_chunk` rows, or one of the smaller batch's size.

    The plans are made once per size and device and kept (each holds its cuFFT work area):
    a plan per batch of varying length (``cupy.fft.rfft``, cached by shape) cost ~0.7 ms of the
    GPU stage's host time, and the cached plans' work areas held hundreds of MiB (BENCHMARKS.md,
    "Speech: the spectrogram's cuFFT plan"). A plan runs one execution at a time (its stream
    is set before each): pipelines in other threads take turns."""
    import cupy
    from cupy.cuda import cufft

    rows, nfft = frames.shape
    step = min(rows, fft_chunk(nfft))
    key = (device_id, nfft, step)
    entry = _PLANS.get(key)
    if entry is None:
        with _PLANS_LOCK:
            entry = _PLANS.get(key)
            if entry is None:
                with cupy.cuda.Device(device_id):
                    plan = cufft.Plan1d(nfft, cufft.CUFFT_R2C, step)
                entry = _PLANS[key] = (plan, threading.Lock())
    plan, lock = entry
    with lock:
        for r in range(0, rows, step):
            plan.fft(frames[r : r + step], out[r : r + step], cufft.CUFFT_FORWARD)


@stream_scoped
def spectrogram_batch(
    inputs,
    nwins,
    window: np.ndarray,
    nfft: int,
    step: int,
    offset: int,
    padding: str,
    power: int,
    time_major: bool,
    stream=None,
):
    """STFT power/magnitude spectra of 1-D float32 signals (any all-but-one-degenerate shape).

    Args:
        inputs: the batch.
        nwins: windows per sample (the operator computed them from the lengths).
        window: the window function (its length is the window length), float32.
        nfft: FFT size (>= window length).
        step: window step; offset: where window 0 starts, negated (window_length // 2 when
            centred, else 0).
        padding: "none", "zero" or "reflect".
        power: 2 (|X|^2) or 1 (|X|).
        time_major: (windows, bins) rather than (bins, windows).
    """

    s = contiguous(inputs)
    n = len(s)
    nbins = nfft // 2 + 1
    nwins = np.asarray(nwins, np.int64)
    shapes = np.empty((n, 2), np.int64)
    shapes[:, int(not time_major)], shapes[:, int(time_major)] = nwins, nbins
    out = alloc_batch(shapes, np.float32, s.device_id)
    if n == 0:
        return out
    first = np.zeros(n, np.int64)
    np.cumsum(nwins[:-1], out=first[1:])
    total = int(first[-1] + nwins[-1])
    rows = fft_rows(total, nfft)  # a few sizes: a few cuFFT plans (rfft_rows)
    frames = device_empty((rows, nfft), np.float32)
    d = np.zeros(n, FRAMES_DESC)
    d["in_ptr"], d["length"] = s.ptrs.view(np.int64), s.shapes.prod(axis=1)
    d["first_frame"], d["nwin"] = first, nwins
    o = np.zeros(n, SPEC_DESC)
    o["out_ptr"], o["first_frame"], o["nwin"] = out.ptrs.view(np.int64), first, nwins
    # both launches' descriptors in one copy (FRAMES_DESC rows are 32 bytes: SPEC_DESC's
    # rows that follow are 8-byte aligned)
    dev = upload(np.concatenate([d.view(np.uint8), o.view(np.uint8)]), stream)
    frames_desc, spec_desc = np.uint64(dev.data.ptr), np.uint64(dev.data.ptr + d.nbytes)
    win = const_table(np.asarray(window, np.float32), s.device_id)[0]
    k = get_function("audio.cu", "extract_frames", s.device_id)
    grid = (-(-nfft // 128), _blocks(nwins.max(), 4), n)
    k(
        grid,
        (128, 4, 1),
        (
            frames_desc,
            win,
            frames,
            np.int32(len(window)),
            np.int32(nfft),
            np.int32(step),
            np.int32(offset),
            np.int32(PADDING[padding]),
        ),
        stream=stream,
    )
    spec = device_empty((rows, nbins), np.complex64)
    rfft_rows(frames, spec, s.device_id)
    k = get_function("audio.cu", "spectrum_out", s.device_id)
    grid = (-(-nbins // 128), _blocks(nwins.max(), 4), n)
    k(
        grid,
        (128, 4, 1),
        (spec_desc, spec, np.int32(nbins), np.int32(power), np.int32(bool(time_major))),
        stream=stream,
    )
    return out


# --- a matrix along one axis (mel_filter_bank, mfcc) ---------------------------------------------


def _split_axis(shapes: np.ndarray, axis: int):
    """(outer, n, inner) of every sample for the given axis."""
    outer = shapes[:, :axis].prod(axis=1) if axis else np.ones(len(shapes), np.int64)
    inner = (
        shapes[:, axis + 1 :].prod(axis=1)
        if axis + 1 < shapes.shape[1]
        else np.ones(len(shapes), np.int64)
    )
    return outer, shapes[:, axis], inner


def _nonzero_ranges(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[k0, k1) of every row's nonzero entries (k0 == k1 for an all-zero row)."""
    nz = w != 0
    any_nz = nz.any(axis=1)
    k0 = np.where(any_nz, nz.argmax(axis=1), 0)
    k1 = np.where(any_nz, w.shape[1] - nz[:, ::-1].argmax(axis=1), 0)
    return k0.astype(np.int32), k1.astype(np.int32)


_FROZEN_TABLES: dict = {}  # (id, device, sparse) -> (table, its device copy, k0, k1)


def const_table(t: np.ndarray, device_id: int, sparse: bool = False) -> tuple:
    """(``t`` on the device, and with ``sparse`` its rows' nonzero ranges [k0, k1) on the
    device, else null pointers). A read-only table that owns its memory (``mel_weights``'
    memoised matrix, a spectrogram's window) is looked up by identity, held by the memo so its
    id is not reused: its bytes are not hashed nor its ranges found again every batch (~50 us
    of the GPU stage's thread per mel_filter_bank call); any other by content
    (``device_table``)."""
    key = (id(t), device_id, sparse)
    hit = _FROZEN_TABLES.get(key)
    if hit is not None and hit[0] is t:
        return hit[1:]
    entry = (device_table(t, device_id), _NULL, _NULL)
    if sparse:
        r0, r1 = _nonzero_ranges(t)
        entry = (entry[0], device_table(r0, device_id), device_table(r1, device_id))
    if isinstance(t, np.ndarray) and t.base is None and not t.flags.writeable:
        if len(_FROZEN_TABLES) >= 64:
            _FROZEN_TABLES.clear()
        _FROZEN_TABLES[key] = (t, *entry)
    return entry


@stream_scoped
def axis_matmul_batch(inputs, axis: int, tables, lifter=None, sparse: bool = False, stream=None):
    """``out[..., m, ...] = sum_k table[m, k] * in[..., k, ...]`` along ``axis`` of every
    float32 sample, ``tables[i]`` (float32 (nout, n)) for sample i, or ``tables`` one array
    for every sample (mel_filter_bank: no per-sample lists and loops); rows scaled by
    ``lifter`` when given. ``sparse``: the tables are one mel filter matrix whose rows are
    nonzero over a short range (only that range is summed)."""
    s = contiguous(inputs)
    n = len(s)
    if n == 0:
        return alloc_batch(s.shapes, np.float32, s.device_id)
    outer, length, inner = _split_axis(s.shapes, axis)
    shapes = s.shapes.copy()
    if isinstance(tables, np.ndarray):  # one table: scalar columns
        nout = tables.shape[0]
        shapes[:, axis] = nout
        out = alloc_batch(shapes, np.float32, s.device_id)
        first = const_table(tables, s.device_id, sparse)
        table_ptrs = first[0].data.ptr
    else:
        nout = np.array([t.shape[0] for t in tables], np.int64)
        shapes[:, axis] = nout
        out = alloc_batch(shapes, np.float32, s.device_id)
        devs = {}
        for t in tables:
            if id(t) not in devs:
                devs[id(t)] = const_table(t, s.device_id, sparse)
        table_ptrs = [devs[id(t)][0].data.ptr for t in tables]
        first = devs[id(tables[0])]
    d = np.zeros(n, AXIS_DESC)
    d["in_ptr"], d["out_ptr"] = s.ptrs.view(np.int64), out.ptrs.view(np.int64)
    d["outer"], d["n"], d["inner"], d["nout"] = outer, length, inner, nout
    d["table_ptr"] = table_ptrs
    k0 = k1 = lift = _NULL
    if sparse:
        k0, k1 = first[1:]
    if lifter is not None:
        lift = device_table(np.asarray(lifter, np.float32), s.device_id)
    k = get_function("audio.cu", "axis_matmul", s.device_id)
    rows = nout if isinstance(nout, int) else int(nout.max())  # (np.max of an int: ~3 us)
    grid = (_blocks((outer * inner).max()), rows, n)
    k(grid, (_BLOCK, 1, 1), (upload(d, stream), k0, k1, lift), stream=stream)
    return out


# --- to_decibels -----------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _log2_floor(min_ratio: float) -> np.float32:
    with np.errstate(divide="ignore"):
        return np.float32(np.log2(np.float32(min_ratio)))


def log2_floor(min_ratio) -> np.float32:
    """``log2(min_ratio)`` in float32, as the CPU computes it for a ratio at the cutoff: the
    kernel clamps in the log domain, since CuPy's -ftz=true flushes a subnormal ``min_ratio``
    (cutoff_db / multiplier below -37.9) to zero in float32 arithmetic."""
    return _log2_floor(float(min_ratio))  # memoised: an operator's constant, every batch


@stream_scoped
def to_decibels_batch(inputs, inv_ref, mul_log2, min_ratio, stream=None):
    """``mul_log2 * log2(max(min_ratio, x * inv_ref))`` of float32 samples; ``inv_ref`` None:
    1 / (each sample's maximum), 1 when that is not positive (two launches: max, then map)."""
    import cupy

    s = contiguous(inputs)
    n = len(s)
    out = alloc_batch(s.shapes, np.float32, s.device_id)
    if n == 0:
        return out
    sizes = s.shapes.prod(axis=1) if s.shapes.shape[1] else np.ones(n, np.int64)
    d = np.zeros(n, FLAT_DESC)
    d["in_ptr"], d["out_ptr"], d["n"] = s.ptrs.view(np.int64), out.ptrs.view(np.int64), sizes
    dev = upload(d, stream)
    grid = (_blocks(sizes.max()), 1, n)
    maxbits = _NULL
    if inv_ref is None:
        maxbits = cupy.zeros(n, np.uint32)
        k = get_function("audio.cu", "sample_max", s.device_id)
        k(grid, (_BLOCK, 1, 1), (dev, maxbits), stream=stream)
    k = get_function("audio.cu", "to_decibels", s.device_id)
    args = (dev, maxbits, np.float32(inv_ref or 1), np.float32(mul_log2), log2_floor(min_ratio))
    k(grid, (_BLOCK, 1, 1), args, stream=stream)
    return out


# --- resampling ------------------------------------------------------------------------------


@stream_scoped
def resample_batch(
    inputs,
    scales,
    out_lengths,
    window,
    out_dtype,
    in_scale: float = 1.0,
    in_mul: float = 1.0,
    in_add: float = 0.0,
    stream=None,
):
    """Resample every (time,) or (time, channels) sample with DALI's windowed sinc.

    Args:
        inputs: the batch.
        scales: in_rate / out_rate per sample.
        out_lengths: output lengths per sample.
        window: a ``ResamplingWindow`` (lookup table, scale, center, lobes).
        out_dtype: output type; integers get ``round(v * max)``, saturated.
        in_scale, in_mul, in_add: input normalisation ``x * in_scale * in_mul + in_add``.
    """
    s = contiguous(inputs)
    n = len(s)
    out_lengths = np.asarray(out_lengths, np.int64)
    shapes = s.shapes.copy()
    if n:
        shapes[:, 0] = out_lengths
    out = alloc_batch(shapes, out_dtype, s.device_id)
    if n == 0:
        return out
    out_dtype = np.dtype(out_dtype)
    d = np.zeros(n, RESAMPLE_DESC)
    d["in_ptr"], d["out_ptr"] = s.ptrs.view(np.int64), out.ptrs.view(np.int64)
    d["n_in"], d["n_out"] = s.shapes[:, 0], out_lengths
    d["channels"] = s.shapes[:, 1] if s.shapes.shape[1] > 1 else 1
    d["scale"] = np.asarray(scales, np.float64)
    lookup = device_table(window.lookup, s.device_id)
    out_max = 0.0 if out_dtype.kind == "f" else float(np.float32(np.iinfo(out_dtype).max))
    k = get_function("audio.cu", f"resample<{ctype(s.dtype)}, {ctype(out_dtype)}>", s.device_id)
    args = (
        upload(d, stream),
        lookup,
        np.float32(window.scale),
        np.float32(window.center),
        np.int32(window.lobes),
        np.float32(in_scale),
        np.float32(in_mul),
        np.float32(in_add),
        np.float32(out_max),
    )
    k((_blocks(max(int(out_lengths.max()), 1)), 1, n), (_BLOCK, 1, 1), args, stream=stream)
    return out


# --- nonsilent_region ------------------------------------------------------------------------

NS_DESC = np.dtype([(f, "<i8") for f in ("in_ptr", "n", "offset", "window")])


@stream_scoped
def nonsilent_region_batch(inputs, windows, references, factors, stream=None):
    """(begin, length) of the non-silent region of every 1-D sample, as two int32 (N,) arrays
    on the device: squares into one buffer, one running sum over the whole batch (int64 for
    integers of up to 16 bits, exact; float64 otherwise), the float32 short-term powers and
    their per-sample maxima, then the first and last loud window.

    Args:
        inputs: the batch of 1-D signals.
        windows: the window length of each sample (``min(window_length, length)``, >= 1).
        references: the reference power per sample, or -1 for the sample's maximum.
        factors: ``10 ** (cutoff_db / 10)`` per sample (float32).
    """
    import cupy

    s = contiguous(inputs)
    n = len(s)
    if n == 0:
        return cupy.zeros(0, np.int32), cupy.zeros(0, np.int32)
    lengths = s.shapes[:, 0] if s.shapes.shape[1] else np.ones(n, np.int64)
    exact = s.dtype.kind in "iu" and s.dtype.itemsize <= 2
    acc, acc_c = (np.int64, "long long") if exact else (np.float64, "double")
    d = np.zeros(n, NS_DESC)
    d["in_ptr"], d["n"], d["window"] = s.ptrs.view(np.int64), lengths, windows
    d["offset"][1:] = np.cumsum(lengths)[:-1]
    total = max(int(lengths.sum()), 1)
    dev = upload(d, stream)
    grid, block = (_blocks(lengths.max()), 1, n), (_BLOCK, 1, 1)
    flat = cupy.empty(total, acc)
    k = get_function("audio.cu", f"squares<{ctype(s.dtype)}, {acc_c}>", s.device_id)
    k(grid, block, (dev, flat), stream=stream)
    cs = cupy.cumsum(flat)
    mms = cupy.empty(total, np.float32)
    maxbits = cupy.zeros(n, np.uint32)
    k = get_function("audio.cu", f"moving_mean_square<{acc_c}>", s.device_id)
    k(grid, block, (dev, cs, mms, maxbits), stream=stream)
    params = np.stack([np.asarray(references, np.float32), np.asarray(factors, np.float32)])
    p = upload(params, stream)
    first = cupy.full(n, np.iinfo(np.int32).max, np.int32)
    last = cupy.full(n, -1, np.int32)
    k = get_function("audio.cu", "loud_windows", s.device_id)
    k(grid, block, (dev, mms, maxbits, p[0], p[1], first, last), stream=stream)
    found = last >= 0
    w = cupy.asarray(np.asarray(windows, np.int32))
    begin = cupy.where(found, first, 0).astype(np.int32)
    length = cupy.where(found, last - first + w, 0).astype(np.int32)
    return begin, length
