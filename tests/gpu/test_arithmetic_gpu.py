"""The graph language on the GPU against the same graph on the CPU: fused expression kernels
(every operation, many type pairs, broadcasting, per-sample scalars, ragged batches,
constants), subscripts (strided gathers, DataNode bounds), constants and shapes on the GPU, and
the seed script with GPU decoding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

import dlpipe  # noqa: E402
from dlpipe import Pipeline, fn, math, types  # noqa: E402
from dlpipe.operators._expr_types import ARITY  # noqa: E402

RNG = np.random.default_rng(11)
TYPES = ["bool", "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64", "float16",
         "float32", "float64"]  # fmt: skip


def both(build, inputs, batch_size=None):
    """Run build(*nodes) on CPU nodes and on their GPU copies; per output (gpu, cpu) lists."""
    n = batch_size or len(inputs[0])
    pipe = Pipeline(batch_size=n, num_threads=2, device_id=0, seed=4)
    with pipe:
        srcs = [fn.external_source(source=(lambda b=b: b), batch=True) for b in inputs]
        cpu = build(*srcs)
        gpu = build(*[s.gpu() for s in srcs])
        cpu = cpu if isinstance(cpu, tuple) else (cpu,)
        gpu = gpu if isinstance(gpu, tuple) else (gpu,)
        pipe.set_outputs(*gpu, *cpu)
    outs = pipe.run()
    k = len(outs) // 2
    res = []
    for g, c in zip(outs[:k], outs[k:], strict=True):
        assert isinstance(g, dlpipe.TensorListGPU)
        g = g.as_cpu()
        res.append(
            ([np.asarray(g.at(i)) for i in range(n)], [np.asarray(c.at(i)) for i in range(n)])
        )
    return res


def data(dtype, shapes=((3, 4), (5, 1), (2, 7)), lo=-30, hi=30):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return [RNG.integers(0, 2, s).astype(bool) for s in shapes]
    if dt.kind == "u":
        lo = 1
    if dt.kind == "f":
        return [RNG.uniform(lo, hi, s).astype(dt) for s in shapes]
    return [np.where(v == 0, 1, v).astype(dt) for v in (RNG.integers(lo, hi, s) for s in shapes)]


def assert_same(gpu, cpu, rtol=1e-6):
    for g, c in zip(gpu, cpu, strict=True):
        assert g.dtype == c.dtype and g.shape == c.shape
        if c.dtype.kind == "f":
            tol = 2e-3 if c.dtype == np.float16 else rtol
            np.testing.assert_allclose(g.astype(np.float64), c.astype(np.float64), rtol=tol,
                                       atol=tol, equal_nan=True)  # fmt: skip
        else:
            np.testing.assert_array_equal(g, c)


BINARY = [op for op, n in ARITY.items() if n == 2]


@pytest.mark.parametrize("a, b", list(itertools.combinations_with_replacement(TYPES, 2)))
def test_every_binary_operation_for_type_pairs(a, b):
    x, y = data(a), data(b)

    def build(p, q):
        outs = []
        for op in BINARY:
            expr_ok = not (
                a == b == "bool"
                and op
                not in ("mul", "eq", "neq", "lt", "leq", "gt", "geq", "bitand", "bitor", "bitxor")
            )
            if op.startswith("bit") and ("float" in a or "float" in b):
                expr_ok = False
            if expr_ok:
                outs.append(dlpipe.operators.arithmetic.arithm_op(op, p, q))
        return tuple(outs)

    for gpu, cpu in both(build, [x, y]):
        assert_same(gpu, cpu, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "float16", "float32", "float64"])
def test_unary_operations_and_math_functions(dtype):
    names = [op for op, n in ARITY.items() if n == 1 and op != "plus"]
    x = [np.abs(v) + (1 if np.dtype(dtype).kind != "f" else 0.5) for v in data(dtype, lo=0, hi=3)]
    x = [v.astype(dtype) for v in x]

    def build(p):
        return tuple(dlpipe.operators.arithmetic.arithm_op(op, p) for op in names)

    for gpu, cpu in both(build, [x]):
        assert_same(gpu, cpu, rtol=2e-6)


def test_a_fused_tree_with_constants_broadcasting_and_scalars():
    imgs = [RNG.integers(0, 255, s).astype(np.uint8) for s in [(6, 5, 3), (3, 9, 3), (1, 1, 3)]]
    scal = [np.array(v, np.float32) for v in (0.5, 2.0, -1.0)]
    legacy = [np.array([v], np.int32) for v in (1, 2, 3)]

    def build(x, s, leg):
        mean = types.Constant(np.float32([10, 20, 30]))  # a node: made inside the pipeline
        y = math.clamp((x - mean) * s / 58.0 + leg, -2, 2)
        return y, (x > 100) & (x < 200), x // leg, -x, x**2, x % 7

    for gpu, cpu in both(build, [imgs, scal, legacy]):
        assert_same(gpu, cpu)


def test_integer_corner_cases():
    a = [np.array([7, -7, np.iinfo(np.int32).min, 5, 0], np.int32)]
    b = [np.array([-2, 2, -1, 0, 3], np.int32)]
    for gpu, cpu in both(lambda x, y: (x // y, x % y, x**y, -x), [a, b]):
        assert_same(gpu, cpu)


def test_shared_constants_and_gpu_constant_nodes():
    x = data("float32")

    def build(p):
        c = types.Constant([1.0, 2.0, 3.0, 4.0], device="gpu" if p.device == "gpu" else "cpu")
        return p[:, :1] * 2 + 1, c, c * 2

    for gpu, cpu in both(build, [x]):
        assert_same(gpu, cpu)


SUBSCRIPTS = [
    lambda x: x[0],
    lambda x: x[-1],
    lambda x: x[1:3],
    lambda x: x[:, ::2],
    lambda x: x[::-1, 1:],
    lambda x: x[..., 0],
    lambda x: x[:, :, ::-2],
    lambda x: x[dlpipe.newaxis("F")],
    lambda x: x[0, 0, 0],
]


@pytest.mark.parametrize("k", range(len(SUBSCRIPTS)))
def test_subscripts(k):
    x = [RNG.integers(0, 100, s).astype(np.int16) for s in [(4, 5, 3), (2, 7, 3), (6, 1, 3)]]
    for gpu, cpu in both(SUBSCRIPTS[k], [x]):
        assert_same(gpu, cpu)


def test_subscript_with_datanode_bounds_and_shapes():
    x = [RNG.integers(0, 100, s).astype(np.uint8) for s in [(4, 5, 3), (2, 7, 3), (6, 1, 3)]]
    hs = [np.array(v, np.int64) for v in (1, 2, 5)]
    n = len(x)
    pipe = Pipeline(batch_size=n, num_threads=2, device_id=0, seed=4)
    with pipe:
        src = fn.external_source(source=lambda: x, batch=True, layout="HWC")
        h = fn.external_source(source=lambda: hs, batch=True)
        g = src.gpu()
        pipe.set_outputs(g[:h, :, 1], src[:h, :, 1], g.shape(device="gpu"), src.shape())
    gs, cs, gsh, csh = pipe.run()
    assert gs.layout() == cs.layout() == "HW"
    assert_same([np.asarray(gs.as_cpu().at(i)) for i in range(n)], [cs.at(i) for i in range(n)])
    assert_same([np.asarray(gsh.as_cpu().at(i)) for i in range(n)], [csh.at(i) for i in range(n)])


def test_seed_script_with_gpu_decoding(image_root):
    from seed_script import create_dali_pipeline

    pipe = create_dali_pipeline(
        batch_size=4, num_threads=2, device_id=0, seed=12, data_dir=image_root, crop=32,
        size=40, shard_id=0, num_shards=2, dali_cpu=False,
    )  # fmt: skip
    images, labels = pipe.run()
    assert isinstance(labels, dlpipe.TensorListGPU)
    assert images.as_cpu().as_array().shape == (4, 3, 32, 32)
    lab = labels.as_cpu().as_array()
    assert lab.shape == (4,) and lab.dtype == np.int32 and set(lab.tolist()) <= {0, 1, 2, 3}
