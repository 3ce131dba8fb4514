"""The fused elementwise kernel of expressions (and the strided gather of subscripts).

An expression plan (``operators/arithmetic.plan``: typed steps in evaluation order) becomes
one generated CUDA kernel, memoised by its source (so by the plan's operations and types, the
number of dimensions and the index width). A launch covers the whole batch: ``blockIdx.z`` is
the sample, threads stride over its elements. Every input is read through per-sample strides
aligned to the output's dimensions, 0 where it broadcasts, so per-sample scalars, broadcast
constants, strided views and ragged batches all go through the same kernel, in one launch.

Host side, per batch: output shapes (numpy broadcasting per sample), dimensions merged where
every input allows it (a batch of whole contiguous samples becomes 1-D), one int64
descriptor row per sample (output pointer, element count, extents, then each input's pointer
and strides) uploaded in one copy.

Descriptor row layout (int64), D = dimensions after merging, K = inputs::

    [out_ptr, n_elements, extent_0 .. extent_{D-1}, in0_ptr, in0_stride_0 .. , in1_ptr, ...]
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import numpy as np

from . import stream_scoped, upload
from ._batch import (
    alloc_batch,
    as_samples,
    c_contiguous,
    sample_list,
    uniform_row,
    uniform_rows,
)

_DIR = os.path.dirname(__file__)
BLOCK = 256

# register (C) type per numpy dtype; float16 values live in float registers
_REG = {
    "bool": "bool",
    "int8": "signed char",
    "uint8": "unsigned char",
    "int16": "short",
    "uint16": "unsigned short",
    "int32": "int",
    "uint32": "unsigned int",
    "int64": "long long",
    "uint64": "unsigned long long",
    "float16": "float",
    "float32": "float",
    "float64": "double",
}
# element (memory) type
_MEM = {**_REG, "float16": "dl_half"}

_FLOAT_FN = {
    "sqrt": "sqrt",
    "rsqrt": "rsqrt",
    "cbrt": "cbrt",
    "exp": "exp",
    "log": "log",
    "log2": "log2",
    "log10": "log10",
    "fabs": "fabs",
    "floor": "floor",
    "ceil": "ceil",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "asinh": "asinh",
    "acosh": "acosh",
    "atanh": "atanh",
    "pow": "pow",
    "fpow": "pow",
    "atan2": "atan2",
    "mod": "remainder",
}
_CMP = {"eq": "==", "neq": "!=", "lt": "<", "leq": "<=", "gt": ">", "geq": ">="}
_BIN = {"add": "+", "sub": "-", "mul": "*", "bitand": "&", "bitor": "|", "bitxor": "^"}
# s OP u with s negative (s signed, u uint64): the result whatever u is
_NEG_LEFT = {
    "eq": "false",
    "neq": "true",
    "lt": "true",
    "leq": "true",
    "gt": "false",
    "geq": "false",
}


def _math(fn: str, dt: str, args: Sequence[str]) -> str:
    """A CUDA math call in the step's precision (float functions for float/half)."""
    name = _FLOAT_FN[fn]
    if dt != "float64":
        name = "rsqrtf" if name == "rsqrt" else name + "f"
    elif name == "rsqrt":
        name = "rsqrt"
    return f"{name}({', '.join(args)})"


def _literal(value, dt: str) -> str:
    reg = _REG[dt]
    if dt == "bool":
        return "true" if value else "false"
    if np.dtype(dt).kind in "iu":
        v = int(value)
        suffix = "ULL" if dt == "uint64" else "LL"
        if dt == "int64" and v == -(2**63):
            return "(long long)(-9223372036854775807LL - 1)"
        return f"({reg})({v}{suffix})"
    v = float(np.array(value, dt))  # the constant as DALI holds it (rounded to its type)
    if np.isnan(v):
        return f"({reg})__longlong_as_double(0x7ff8000000000000LL)"
    if np.isinf(v):
        bits = "0x7ff0000000000000LL" if v > 0 else "(long long)0xfff0000000000000ULL"
        return f"({reg})__longlong_as_double({bits})"
    return f"({reg})({v.hex()})"


def _compare(op: str, a: str, da: str, b: str, db: str) -> str:
    """A comparison with DALI's semantics: floats in the wider float type (float for half),
    integers exactly (signed against unsigned included)."""
    ka, kb = np.dtype(da).kind, np.dtype(db).kind
    if ka == "f" or kb == "f":
        floats = [d for d in (da, db) if np.dtype(d).kind == "f"]
        ct = "double" if "float64" in floats else "float"
        return f"(({ct})({a}) {_CMP[op]} ({ct})({b}))"
    a_u64, b_u64 = da == "uint64", db == "uint64"
    a_signed, b_signed = ka == "i", kb == "i"
    if a_u64 and b_signed:  # u OP s == -(s OP' u): flip through the three-way comparison
        return f"(-dl_cmp_su((long long)({b}), {a}) {_CMP[op]} 0)"
    if b_u64 and a_signed:
        return f"(dl_cmp_su((long long)({a}), {b}) {_CMP[op]} 0)"
    ct = "unsigned long long" if not (a_signed or b_signed) else "long long"
    return f"(({ct})({a}) {_CMP[op]} ({ct})({b}))"


def _op_expr(op: str, dt: str, args: list[str], arg_dts: Sequence[str]) -> str:
    """The C expression of one step, in the step's register type."""
    reg = _REG[dt]
    kind = np.dtype(dt).kind
    if op in _CMP:
        return _compare(op, args[0], arg_dts[0], args[1], arg_dts[1])
    # static_cast to the output type first (to half: rounded, as the CPU side's astype)
    a = [
        f"dl_round_half((float)({x}))" if dt == "float16" and d != "float16" else f"(({reg})({x}))"
        for x, d in zip(args, arg_dts, strict=True)
    ]
    if op in _BIN:
        return f"(({reg})({a[0]} {_BIN[op]} {a[1]}))"
    if op == "plus":
        return a[0]
    if op == "minus":
        return f"(({reg})(-{a[0]}))"
    if op == "abs":
        return f"dl_abs<{reg}>({a[0]})"
    if op == "min":
        return f"({a[0]} < {a[1]} ? {a[0]} : {a[1]})"
    if op == "max":
        return f"({a[0]} > {a[1]} ? {a[0]} : {a[1]})"
    if op == "clamp":
        return f"dl_clamp<{reg}>({a[0]}, {a[1]}, {a[2]})"
    if op in ("div", "fdiv"):
        return f"({a[0]} / {a[1]})" if kind == "f" else f"dl_idiv<{reg}>({a[0]}, {a[1]})"
    if op == "mod":
        return _math("mod", dt, a) if kind == "f" else f"dl_imod<{reg}>({a[0]}, {a[1]})"
    if op in ("pow", "fpow"):
        return _math("pow", dt, a) if kind == "f" else f"dl_ipow<{reg}>({a[0]}, {a[1]})"
    if op in _FLOAT_FN:
        return _math(op, dt, a)
    raise ValueError(f"no GPU code for the expression operation {op!r}")


@functools.cache
def _helpers() -> str:
    """``common.cuh`` and ``arithmetic.cuh`` inlined, and the clamp helper (read once)."""
    with open(os.path.join(_DIR, "arithmetic.cuh")) as f:
        helpers = f.read().replace("#pragma once", "").replace('#include "common.cuh"', "")
    with open(os.path.join(_DIR, "common.cuh")) as f:
        common = f.read().replace("#pragma once", "")
    clamp = (
        "template <typename T> __device__ __forceinline__ T dl_clamp(T v, T lo, T hi) {\n"
        "  const T x = v < lo ? lo : v;\n  return x > hi ? hi : x;\n}\n"
    )
    return f"{common}\n{helpers}\n{clamp}\n"


@functools.cache
def kernel_source(steps: tuple, ndim: int, wide_index: bool) -> str:
    """The CUDA source of one plan (``extern "C" dl_expr``), for ``ndim`` output dimensions
    (memoised: a pipeline launches the same few plans every batch).

    Args:
        steps: the plan (``operators/arithmetic.plan``).
        ndim: dimensions after merging (>= 1).
        wide_index: 64-bit element indices (a sample of 2**31 elements or more).
    """
    idx_t = "long long" if wide_index else "unsigned int"
    loads = sorted({p for kind, _, p in steps if kind == "load"})
    k_of = {k: j for j, k in enumerate(loads)}
    row = 2 + ndim + len(loads) * (1 + ndim)
    body: list[str] = []
    for j, k in enumerate(loads):
        dt = next(d for kind, d, p in steps if kind == "load" and p == k)
        base = 2 + ndim + j * (1 + ndim)
        body.append(f"  const {_MEM[dt]}* __restrict__ in{j} = (const {_MEM[dt]}*)d[{base}];")
    out_dt = steps[-1][1]
    body += [
        f"  {_MEM[out_dt]}* __restrict__ out = ({_MEM[out_dt]}*)d[0];",
        f"  const {idx_t} total = ({idx_t})d[1];",
        f"  for ({idx_t} i = ({idx_t})blockIdx.x * blockDim.x + threadIdx.x; i < total;",
        f"       i += ({idx_t})gridDim.x * blockDim.x) {{",
    ]
    offs = [f"o{j}" for j in range(len(loads))]
    if ndim == 1:
        for j in range(len(loads)):
            base = 2 + ndim + j * (1 + ndim)
            body.append(f"    const long long o{j} = (long long)i * d[{base + 1}];")
    else:
        body.append(f"    {idx_t} rem = i;")
        for j in range(len(loads)):
            body.append(f"    long long o{j} = 0;")
        for dim in range(ndim - 1, -1, -1):
            body.append(f"    {{ const {idx_t} e = ({idx_t})d[{2 + dim}];")
            body.append(f"      const {idx_t} c = rem % e; rem /= e;")
            for j in range(len(loads)):
                base = 2 + ndim + j * (1 + ndim)
                body.append(f"      o{j} += (long long)c * d[{base + 1 + dim}];")
            body.append("    }")
    for s, (kind, dt, payload) in enumerate(steps):
        reg = _REG[dt]
        if kind == "load":
            j = k_of[payload]
            src = f"half_to_float(in{j}[{offs[j]}])" if dt == "float16" else f"in{j}[{offs[j]}]"
            body.append(f"    const {reg} v{s} = {src};")
        elif kind == "const":
            body.append(f"    const {reg} v{s} = {_literal(payload, dt)};")
        else:
            op, arg_steps, arg_dts = payload
            expr = _op_expr(op, dt, [f"v{a}" for a in arg_steps], arg_dts)
            if dt == "float16":
                expr = f"dl_round_half({expr})"
            body.append(f"    const {reg} v{s} = {expr};")
    last = f"v{len(steps) - 1}"
    store = f"float_to_half({last})" if out_dt == "float16" else last
    body += [f"    out[i] = {store};", "  }"]
    head = (
        'extern "C" __global__ void dl_expr(const long long* __restrict__ descs) {\n'
        f"  const long long* d = descs + (long long)blockIdx.z * {row};\n"
    )
    return _helpers() + head + "\n".join(body) + "\n}\n"


@functools.cache
def _get_expr_kernel(steps: tuple, ndim: int, wide_index: bool, device_id: int):
    """The compiled ``dl_expr`` of a plan on a device (memoised by the plan, not its source:
    one dictionary lookup per launch)."""
    import cupy

    source = kernel_source(steps, ndim, wide_index)
    with cupy.cuda.Device(device_id):
        return cupy.RawModule(code=source, options=("--std=c++17",)).get_function("dl_expr")


# --- host side: shapes, strides, merged dimensions, descriptors ----------------------------------


def _shape_str(shape: tuple) -> str:
    return " x ".join(str(s) for s in shape) if shape else "()"


def broadcast_shape(shapes: Sequence[tuple]) -> tuple:
    """numpy's broadcast of per-sample shapes, with DALI's error when they do not broadcast.

    Raises:
        ValueError: naming both shapes and the dimension that differs.
    """
    out: tuple = ()
    for s in shapes:
        try:
            out = np.broadcast_shapes(out, s)
        except ValueError:
            n = max(len(out), len(s))
            a, b = (1,) * (n - len(out)) + tuple(out), (1,) * (n - len(s)) + tuple(s)
            d = next(i for i in range(n) if a[i] != b[i] and a[i] != 1 and b[i] != 1)
            raise ValueError(
                "Can't broadcast shapes:\n"
                f"{_shape_str(tuple(out))} (d={d - (n - len(out))})\n"
                f"{_shape_str(tuple(s))} (d={d - (n - len(s))})"
            ) from None
    return tuple(out)


def broadcast_strides(in_shape, in_strides, out_shape) -> list[int]:
    """Strides of an input read at the output's coordinates (numpy broadcasting): 0 along the
    dimensions it is broadcast in, including the leading ones it lacks."""
    pad = len(out_shape) - len(in_shape)
    strides = [0] * pad
    for s, st, o in zip(in_shape, in_strides, out_shape[pad:], strict=True):
        strides.append(0 if s == 1 and o != 1 else int(st))
    return strides


def merge_dims(extents: np.ndarray, strides: list[np.ndarray]) -> tuple[np.ndarray, list]:
    """Merge adjacent dimensions wherever every input of every sample allows it.

    Args:
        extents: (N, D) output extents.
        strides: per input, (N, D) strides aligned to the output (0 = broadcast).

    Returns:
        The (N, D') extents and per-input (N, D') strides, D' >= 1. Dimension ``d`` merges
        into ``d + 1`` when, for all samples and inputs, ``stride[d] == stride[d+1] *
        extent[d+1]`` (contiguous pairs, and broadcast pairs: 0 == 0); extent-1 dimensions
        are dropped.
    """
    n = extents.shape[0]
    keep = np.flatnonzero((extents != 1).any(axis=0))
    if not len(keep):
        return np.ones((n, 1), np.int64), [np.zeros((n, 1), np.int64) for _ in strides]
    ext = extents[:, keep]
    st = np.stack([s[:, keep] for s in strides]) if strides else np.zeros((0, n, len(keep)))
    # from the innermost dimension out: a block of merged dimensions has the product of their
    # extents and the innermost one's strides
    block_e, block_s = ext[:, -1], st[:, :, -1]
    exts, sts = [], []
    for d in range(ext.shape[1] - 2, -1, -1):
        e = ext[:, d]
        if ((st[:, :, d] == block_s * block_e) | (e == 1)).all():
            block_e = block_e * e
        else:
            exts.append(block_e)
            sts.append(block_s)
            block_e, block_s = e, st[:, :, d]
    exts.append(block_e)
    sts.append(block_s)
    merged = np.stack(sts[::-1], axis=2).astype(np.int64, copy=False)
    return np.stack(exts[::-1], axis=1), list(merged)


def pack_descriptors(out_ptrs, totals, extents, in_ptrs: list, in_strides: list) -> np.ndarray:
    """The (N, row) int64 descriptor table (module docstring)."""
    n, ndim = extents.shape
    cols = [np.asarray(out_ptrs, np.uint64).view(np.int64)[:, None], totals[:, None], extents]
    for p, s in zip(in_ptrs, in_strides, strict=True):
        cols += [np.asarray(p, np.uint64).view(np.int64)[:, None], s]
    return np.ascontiguousarray(np.concatenate(cols, axis=1).astype(np.int64))


def broadcast_batch(inputs: Sequence) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """numpy's broadcasting, sample by sample, over whole batches at once.

    Args:
        inputs: objects with ``shapes`` and ``strides`` (N, ndim_k) int64 arrays (SampleLists);
            every input has one number of dimensions for all its samples.

    Returns:
        The output shapes (N, D), D the largest ndim_k, and per input its strides aligned to
        them (N, D): the input's own right-aligned, 0 along the dimensions where its extent is
        1 (broadcast, or a single element: the stride is never used) and the leading ones it
        lacks. None when the shapes of some sample do not broadcast (the caller names it).
    """
    n = len(inputs[0].shapes)
    ndim = max(s.shapes.shape[1] for s in inputs)
    aligned = np.ones((len(inputs), n, ndim), np.int64)
    for k, s in enumerate(inputs):
        if s.shapes.shape[1]:
            aligned[k, :, ndim - s.shapes.shape[1] :] = s.shapes
    ones = aligned == 1
    out = np.where(ones, -1, aligned).max(axis=0, initial=-1)
    out[out < 0] = 1  # every input has extent 1 there
    if not (ones | (aligned == out)).all():
        return None
    strides = []
    for k, s in enumerate(inputs):
        st = np.zeros((n, ndim), np.int64)
        d = s.strides.shape[1]
        if d:
            st[:, ndim - d :] = s.strides
        st[ones[k]] = 0
        strides.append(st)
    return out, strides


def _launch(steps, out_shapes: np.ndarray, out_dtype, in_ptrs, in_strides, device_id, stream):
    """Allocate the output and run the plan over per-sample input views.

    Args:
        out_shapes: (N, D) int64, the output samples' shapes.
        in_ptrs: per input, (N,) device addresses of each sample's first element.
        in_strides: per input, (N, D) strides (elements) aligned to the output's dimensions.
    """
    n = len(out_shapes)
    out = alloc_batch(out_shapes, out_dtype, device_id)
    if n == 0:
        return out
    if out_shapes.shape[1]:
        extents, strides = out_shapes, in_strides
    else:  # 0-d samples: one dimension of extent 1
        extents = np.ones((n, 1), np.int64)
        strides = [np.zeros((n, 1), np.int64) for _ in in_strides]
    ext, sts = merge_dims(extents, strides)
    totals = extents.prod(axis=1)
    if not totals.any():
        return out
    descs = pack_descriptors(out.ptrs, totals, ext, in_ptrs, sts)
    _run_table(steps, ext.shape[1], totals, descs, device_id, stream)
    return out


def _run_table(steps, ndim: int, totals: np.ndarray, descs: np.ndarray, device_id, stream):
    """Upload the descriptor table ``descs`` (one row per sample of ``totals`` elements, over
    ``ndim`` dimensions) and launch the plan's kernel over it (:func:`_launch`,
    :func:`_launch_flat`)."""
    import cupy

    wide = bool(totals.max() >= 2**31)
    kernel = _get_expr_kernel(steps, ndim, wide, device_id)
    blocks = int(min(max(1, -(-int(totals.max()) // BLOCK)), 4096))
    with cupy.cuda.Device(device_id):
        dev = upload(descs, stream)
        kernel((blocks, 1, len(descs)), (BLOCK, 1, 1), (dev,), stream=stream)


@stream_scoped
def expression_batch(steps: tuple, inputs: Sequence, stream=None):
    """Evaluate a plan over GPU batches (SampleLists or lists of CuPy arrays), one launch.
    Shapes broadcast per sample, without a Python loop over the samples
    (:func:`broadcast_batch`).

    Raises:
        ValueError: shapes that do not broadcast (naming both, as the CPU side).
    """
    samples = [as_samples(x) for x in inputs]
    n = len(samples[0])
    if any(len(s) != n for s in samples):
        raise ValueError(f"inputs of an expression have different batch sizes: "
                         f"{[len(s) for s in samples]}")  # fmt: skip
    used = [samples[k] for k in sorted({p for kind, _, p in steps if kind == "load"})]
    out_dtype = np.dtype(steps[-1][1])
    rows = tuple(uniform_row(s) for s in used) if n else (None,)
    if None not in rows:  # one layout for every sample: worked out once
        layout = _uniform_layout(rows)
        if layout is not None:
            return _launch_uniform(steps, layout, n, out_dtype, [s.ptrs for s in used],
                                   samples[0].device_id, stream)  # fmt: skip
    same = _same_c_shapes(used)
    if same is not None:
        return _launch_flat(steps, same, out_dtype, [s.ptrs for s in used],
                            samples[0].device_id, stream)  # fmt: skip
    plan = broadcast_batch(used)
    if plan is None:  # the first sample whose shapes do not broadcast raises, named
        for i in range(n):
            broadcast_shape([tuple(int(v) for v in s.shapes[i]) for s in used])
        raise AssertionError("broadcast_batch and broadcast_shape disagree")  # pragma: no cover
    out_shapes, strides = plan
    return _launch(steps, out_shapes, out_dtype, [s.ptrs for s in used], strides,
                   samples[0].device_id, stream)  # fmt: skip


def _same_c_shapes(used: Sequence) -> np.ndarray | None:
    """The (N, D) shapes of ragged inputs that all have them, C-contiguous, with no extent
    of 1 (NeMo's ``audio + 0.00001 * noise``, ``spectrogram + guard``); None otherwise. For
    those, :func:`broadcast_batch` and :func:`merge_dims` give one dimension per sample (its
    element count, stride 1 for every input), which :func:`_launch_flat` writes at once."""
    shapes = used[0].shapes
    if not len(shapes) or shapes.ndim != 2 or not shapes.shape[1]:
        return None
    key = shapes.tobytes()
    for s in used:
        if s.shapes is not shapes and (s.shapes.shape != shapes.shape or s.shapes.tobytes() != key):
            return None
    if not shapes.all() or (shapes == 1).any():
        return None  # empty samples and extents of 1: the general path
    if not all(c_contiguous(s) for s in used):
        return None
    return shapes


def flat_descriptors(out_ptrs, totals: np.ndarray, in_ptrs: list) -> np.ndarray:
    """:func:`pack_descriptors` of samples merged to one dimension each (``totals`` elements,
    stride 1 for every input), without the general path's arrays."""
    table = np.empty((len(totals), 3 + 2 * len(in_ptrs)), np.int64)
    table[:, 0] = np.asarray(out_ptrs, np.uint64).view(np.int64)
    table[:, 1] = totals
    table[:, 2] = totals
    for k, p in enumerate(in_ptrs):
        table[:, 3 + 2 * k] = np.asarray(p, np.uint64).view(np.int64)
        table[:, 4 + 2 * k] = 1
    return table


def _launch_flat(steps, shapes: np.ndarray, out_dtype, in_ptrs, device_id, stream):
    """:func:`_launch` for inputs of one set of C-contiguous shapes (:func:`_same_c_shapes`):
    the descriptor table ``pack_descriptors`` would make of the merged dimensions (each row
    the output's address, its element count twice, then each input's address and stride 1),
    written directly."""
    out = alloc_batch(shapes, out_dtype, device_id)
    totals = shapes.prod(axis=1)
    _run_table(steps, 1, totals, flat_descriptors(out.ptrs, totals, in_ptrs), device_id, stream)
    return out


class _OneSample:
    def __init__(self, shape, strides):
        self.shapes = np.array([shape], np.int64).reshape(1, len(shape))
        self.strides = np.array([strides], np.int64).reshape(1, len(shape))


@functools.lru_cache(maxsize=4096)
def _uniform_layout(rows: tuple) -> tuple | None:
    """The launch layout of a batch whose inputs have one shape and strides each (``rows``:
    per input, (shape, strides)), memoised: (output shape, the descriptor row without its
    pointers, the columns of the input pointers, the element count, merged ndim). None when
    the shapes do not broadcast."""
    plan = broadcast_batch([_OneSample(*r) for r in rows])
    if plan is None:
        return None
    out, strides = plan
    if out.shape[1]:
        extents = out
    else:  # 0-d samples: one dimension of extent 1
        extents, strides = np.ones((1, 1), np.int64), [np.zeros((1, 1), np.int64) for _ in rows]
    ext, sts = merge_dims(extents, strides)
    total = int(extents.prod())
    row = pack_descriptors([0], np.array([total], np.int64), ext, [[0]] * len(rows), sts)[0]
    ndim = ext.shape[1]
    ptr_cols = [2 + ndim + j * (1 + ndim) for j in range(len(rows))]
    return tuple(out[0].tolist()), row, ptr_cols, total, ndim


def uniform_descriptors(layout: tuple, out_ptrs, in_ptrs: Sequence) -> np.ndarray:
    """The descriptor table of a batch of one layout (:func:`_uniform_layout`): the layout's
    row once per sample, with the sample's output and input pointers written in."""
    _, row, ptr_cols, _, _ = layout
    descs = np.empty((len(out_ptrs), len(row)), np.int64)
    descs[:] = row
    descs[:, 0] = np.asarray(out_ptrs, np.uint64).view(np.int64)
    for col, p in zip(ptr_cols, in_ptrs, strict=True):
        descs[:, col] = np.asarray(p, np.uint64).view(np.int64)
    return descs


def _launch_uniform(steps, layout, n: int, out_dtype, in_ptrs, device_id, stream):
    """:func:`_launch` for a batch of one layout (:func:`_uniform_layout`): the descriptor
    table is the layout's row repeated, with each sample's pointers written in."""
    import cupy

    SampleList = sample_list()
    out_shape, _, _, total, ndim = layout
    with cupy.cuda.Device(device_id):  # (one device switch for the output and the launch)
        out = SampleList.from_dense(cupy.empty((n, *out_shape), out_dtype))
        if not total:
            return out
        descs = uniform_descriptors(layout, out.ptrs, in_ptrs)
        kernel = _get_expr_kernel(steps, ndim, total >= 2**31, device_id)
        blocks = int(min(max(1, -(-total // BLOCK)), 4096))
        dev = upload(descs, stream)
        kernel((blocks, 1, n), (BLOCK, 1, 1), (dev,), stream=stream)
    return out


@stream_scoped
def gather_views(samples, views: Sequence[tuple], stream=None):
    """Copy per-sample strided views of a GPU batch into a fresh contiguous batch, one launch.

    Args:
        samples: the source batch (SampleList).
        views: per sample ``(offset, shape, strides)`` in elements (``subscript_view``);
            strides may be 0 or negative.
    """
    ndim = len(views[0][1]) if views else 0  # (one subscript: one rank for every sample)
    offsets = np.array([v[0] for v in views], np.int64)
    shapes = np.array([v[1] for v in views], np.int64).reshape(len(views), ndim)
    strides = np.array([v[2] for v in views], np.int64).reshape(shapes.shape)
    return gather_view_arrays(samples, offsets, shapes, strides, stream=stream)


@functools.cache
def _copy_steps(dtype: np.dtype) -> tuple:
    """The plan of a copy of ``dtype`` values (a dtype's ``name`` is a Python property that
    costs more than the lookup; one per subscript and batch)."""
    return (("load", dtype.name, 0),)


@stream_scoped
def gather_view_arrays(samples, offsets, shapes, strides, stream=None):
    """:func:`gather_views` with the views as arrays: ``offsets`` (N,), ``shapes`` and
    ``strides`` (N, ndim), in elements."""
    samples = as_samples(samples)
    dt = samples.dtype
    steps = _copy_steps(dt)
    ptrs = samples.ptrs.astype(np.int64) + np.asarray(offsets, np.int64) * np.int64(dt.itemsize)
    shapes = np.asarray(shapes, np.int64)
    strides = np.array(strides, np.int64)  # a copy: written below
    strides[shapes == 1] = 0
    ptrs = ptrs.view(np.uint64)
    if len(shapes) and uniform_rows(shapes) and uniform_rows(strides):  # (table[i]: memoised)
        layout = _uniform_layout(((tuple(shapes[0].tolist()), tuple(strides[0].tolist())),))
        if layout is not None:
            return _launch_uniform(steps, layout, len(shapes), dt, [ptrs], samples.device_id,
                                   stream)  # fmt: skip
    return _launch(steps, shapes, dt, [ptrs], [strides], samples.device_id, stream)
