"""DataNode expressions on the CPU: values and dtypes against numpy references written here,
DALI's type promotion table (copied from DALI's ``arithmetic_meta.h``, not computed by the code
under test), scalar constants, broadcasting, layouts, errors, and one operator per tree."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dlpipe import Pipeline, PipelineError, fn, types
from dlpipe.graph import DataNode

RNG = np.random.default_rng(0)


def run(build, inputs, batch_size=None, layouts=None):
    """Feed ``inputs`` (one list of per-sample arrays per external source) and return the
    outputs of ``build(*sources)`` as lists of numpy arrays, plus the TensorLists."""
    n = batch_size or len(inputs[0])
    pipe = Pipeline(batch_size=n, num_threads=2, device_id=None, seed=3)
    with pipe:
        srcs = [
            fn.external_source(source=(lambda b=b: b), batch=True, layout=(layouts or {}).get(i))
            for i, b in enumerate(inputs)
        ]
        outs = build(*srcs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pipe.set_outputs(*outs)
    tls = pipe.run()
    return [[np.asarray(tl.at(i)) for i in range(len(tl))] for tl in tls], tls


def batch(dtype, shapes=((2, 3), (4, 1), (1, 5)), lo=-20, hi=20):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return [RNG.integers(0, 2, s).astype(bool) for s in shapes]
    if dt.kind == "u":
        lo = max(lo, 0)
    if dt.kind == "f":
        return [RNG.uniform(lo, hi, s).astype(dt) for s in shapes]
    return [RNG.integers(lo, hi, s).astype(dt) for s in shapes]


# --- DALI's type promotion table (arithmetic_meta.h, REGISTER_TYPE_PROMOTION) ------------------

_PROMOTIONS = """
float float16 float
double float16 double
double float double
bool float16 float16
int8 float16 float16
uint8 float16 float16
int16 float16 float16
uint16 float16 float16
int32 float16 float16
uint32 float16 float16
int64 float16 float16
uint64 float16 float16
bool float float
int8 float float
uint8 float float
int16 float float
uint16 float float
int32 float float
uint32 float float
int64 float float
uint64 float float
bool double double
int8 double double
uint8 double double
int16 double double
uint16 double double
int32 double double
uint32 double double
int64 double double
uint64 double double
int8 bool int8
uint8 bool uint8
int16 bool int16
uint16 bool uint16
int32 bool int32
uint32 bool uint32
int64 bool int64
uint64 bool uint64
uint8 int8 int16
int16 int8 int16
uint16 int8 int32
int32 int8 int32
uint32 int8 int64
int64 int8 int64
uint64 int8 int64
int16 uint8 int16
uint16 uint8 uint16
int32 uint8 int32
uint32 uint8 uint32
int64 uint8 int64
uint64 uint8 uint64
uint16 int16 int32
int32 int16 int32
uint32 int16 int64
int64 int16 int64
uint64 int16 int64
int32 uint16 int32
uint32 uint16 uint32
int64 uint16 int64
uint64 uint16 uint64
uint32 int32 int64
int64 int32 int64
uint64 int32 int64
int64 uint32 int64
uint64 uint32 uint64
uint64 int64 int64
"""
_C = {"float": "float32", "double": "float64"}
TABLE = {}
for _line in _PROMOTIONS.strip().splitlines():
    _a, _b, _r = (np.dtype(_C.get(t, t)) for t in _line.split())
    TABLE[(_a, _b)] = TABLE[(_b, _a)] = _r
ALL = [
    np.dtype(t)
    for t in (
        "bool",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
]
for _t in ALL:
    TABLE[(_t, _t)] = _t


def test_promotion_table_is_complete():
    assert len(TABLE) == len(ALL) ** 2


def test_every_type_pair_promotes_as_dalis_table():
    """All 144 ordered pairs in one pipeline: (a * b) for every pair of 12 typed sources."""
    pairs = list(itertools.product(range(len(ALL)), repeat=2))
    data = [[np.ones((2,), t), np.zeros((1,), t)] for t in ALL]
    outs, _ = run(lambda *s: tuple(s[i] * s[j] for i, j in pairs), data)
    for (i, j), out in zip(pairs, outs, strict=True):
        assert out[0].dtype == TABLE[(ALL[i], ALL[j])], (ALL[i], ALL[j])


@pytest.mark.parametrize("a", ["bool", "int8", "uint8", "int32", "uint64", "float16"])
@pytest.mark.parametrize("b", ["bool", "int16", "uint32", "int64", "float32", "float64"])
def test_truediv_gives_float32_for_integers_else_promoted_float(a, b):
    a, b = np.dtype(a), np.dtype(b)
    if a == b == np.bool_:
        return
    outs, _ = run(lambda x, y: x / y, [[np.ones(3, a)], [np.ones(3, b)]])
    want = np.float32 if a.kind in "biu" and b.kind in "biu" else TABLE[(a, b)]
    assert outs[0][0].dtype == want


def test_python_scalars_are_int32_float32_bool_constants():
    u8 = [np.array([250, 3], np.uint8)]
    f16 = [np.array([1.5, -2.0], np.float16)]
    i8 = [np.array([100, -100], np.int8)]
    outs, _ = run(
        lambda u, h, i: (u + 10, u * 2.5, h * 2.0, h + 1, u + True, i + 100, -u, u // 7),
        [u8, f16, i8],
    )
    add, mulf, hmul, hadd, addb, i8add, neg, fdiv = (o[0] for o in outs)
    assert add.dtype == np.int32 and add.tolist() == [260, 13]  # uint8 + int32 literal
    assert mulf.dtype == np.float32 and mulf.tolist() == [625.0, 7.5]
    assert hmul.dtype == np.float32  # float16 * float literal (float32) -> float32
    assert hadd.dtype == np.float16 and hadd.tolist() == [2.5, -1.0]
    assert addb.dtype == np.uint8 and addb.tolist() == [251, 4]
    assert i8add.dtype == np.int32 and i8add.tolist() == [200, 0]
    assert neg.dtype == np.uint8 and neg.tolist() == [6, 253]  # wraps, as C's unary minus
    assert fdiv.dtype == np.int32 and fdiv.tolist() == [35, 0]


def test_typed_constants_keep_their_type():
    i8 = [np.array([100, -100], np.int8)]
    outs, _ = run(
        lambda i: (
            i + types.Constant(100, dtype=types.INT8),
            i * types.Constant(2).float16(),
            i + np.int16(1),
            np.float64(0.5) * i,
        ),
        [i8],
    )
    wrap, half, i16, f64 = (o[0] for o in outs)
    assert wrap.dtype == np.int8 and wrap.tolist() == [-56, 0]  # int8 arithmetic wraps
    assert half.dtype == np.float16 and half.tolist() == [200.0, -200.0]
    assert i16.dtype == np.int16 and i16.tolist() == [101, -99]
    assert f64.dtype == np.float64 and f64.tolist() == [50.0, -50.0]


# --- values against numpy ------------------------------------------------------------------------


def _c_trunc_div(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int16", "float32", "float64"])
def test_binary_operators_match_numpy(dtype):
    dt = np.dtype(dtype)
    a = batch(dt)
    b = [np.where(x == 0, 3, x).astype(dt) for x in batch(dt)]
    outs, _ = run(
        lambda x, y: (x + y, x - y, x * y, x / y, x // y, x % y, x == y, x < y, x >= y, x != y),
        [a, b],
    )
    for i in range(3):
        x, y = a[i], b[i]
        with np.errstate(all="ignore"):
            f = np.float32 if dt.kind != "f" else dt
            ref = [
                x + y,
                x - y,
                x * y,
                x.astype(f) / y.astype(f),
                x / y if dt.kind == "f" else _c_trunc_div(x, y),
                np.fmod(x, y) if dt.kind != "f" else x - np.round(x / y) * y,
                x == y,
                x < y,
                x >= y,
                x != y,
            ]
        for o, r in zip(outs, ref, strict=True):
            got = o[i]
            assert got.dtype == np.asarray(r).dtype and got.shape == x.shape
            if dt.kind == "f":
                np.testing.assert_allclose(got, r, rtol=1e-6, atol=1e-5)
            else:
                np.testing.assert_array_equal(got, r)


def test_integer_division_truncates_and_remainder_keeps_sign_of_dividend():
    a = [np.array([7, -7, 7, -7, 0, 5], np.int32)]
    b = [np.array([2, 2, -2, -2, 3, 0], np.int32)]
    outs, _ = run(lambda x, y: (x // y, x % y), [a, b])
    assert outs[0][0].tolist() == [3, -3, -3, 3, 0, 0]  # by zero: 0
    assert outs[1][0].tolist() == [1, -1, 1, -1, 0, 0]


def test_float_remainder_is_ieee_remainder_and_floordiv_is_division():
    a = [np.array([5.0, 7.0, -7.5, 1.0], np.float32)]
    b = [np.array([2.0, 2.0, 2.0, 3.0], np.float32)]
    outs, _ = run(lambda x, y: (x % y, x // y), [a, b])
    assert outs[0][0].tolist() == [1.0, -1.0, 0.5, 1.0]  # C remainder(): ties to even
    np.testing.assert_allclose(outs[1][0], [2.5, 3.5, -3.75, 1 / 3], rtol=1e-6)


def test_power_of_integers_and_floats():
    a = [np.array([2, -3, 5, 1, 0], np.int32)]
    b = [np.array([10, 3, -1, -2, 0], np.int32)]
    f = [np.array([4.0, 2.0, 9.0, 1.0, 0.5], np.float32)]
    outs, _ = run(lambda x, y, z: (x**y, z**0.5, 2**x, z ** types.Constant(2)), [a, b, f])
    assert outs[0][0].tolist() == [1024, -27, 0, 0, 1]  # negative integer powers give 0
    np.testing.assert_allclose(outs[1][0], np.sqrt(f[0]), rtol=1e-6)
    assert outs[2][0].dtype == np.int32 and outs[2][0].tolist() == [4, 0, 32, 2, 1]
    np.testing.assert_allclose(outs[3][0], f[0] ** 2, rtol=1e-6)


def test_reflected_operators():
    a = [np.array([1, 2, 4], np.int32)]
    outs, _ = run(lambda x: (10 - x, 12 // x, 1 / x, 3 * x, 5 + x, 7 & x, 6 | x, 5 ^ x), [a])
    vals = [o[0].tolist() for o in outs]
    assert vals[0] == [9, 8, 6] and vals[1] == [12, 6, 3]
    np.testing.assert_allclose(vals[2], [1, 0.5, 0.25])
    assert vals[3:] == [[3, 6, 12], [6, 7, 9], [1, 2, 4], [7, 6, 6], [4, 7, 1]]


def test_in_place_operators_build_new_nodes():
    a = [np.array([1, 2, 3], np.int32)]

    def build(x):
        y = x
        y += 1
        y *= 2
        y -= x
        y //= 2
        return x, y

    outs, _ = run(build, [a])
    assert outs[0][0].tolist() == [1, 2, 3]
    assert outs[1][0].tolist() == [1, 2, 2]  # ((x+1)*2 - x) // 2


def test_comparisons_between_signed_and_unsigned_are_exact():
    a = [np.array([-1, 5, 2**31 - 1], np.int32)]
    b = [np.array([4294967295, 5, 2**31], np.uint32)]
    c = [np.array([16777217, 1, 0], np.int32)]
    d = [np.array([16777216.0, 1.5, -0.0], np.float32)]
    outs, _ = run(lambda x, y, z, w: (x < y, x == y, z == w, z > w), [a, b, c, d])
    assert outs[0][0].tolist() == [True, False, True]
    assert outs[1][0].tolist() == [False, True, False]
    # int vs float compares in float32 (C's conversions): 16777217 rounds to 16777216
    assert outs[2][0].tolist() == [True, False, True]
    assert outs[3][0].tolist() == [False, False, False]


def test_bitwise_and_boolean_logic():
    a = [np.array([True, True, False, False])]
    b = [np.array([True, False, True, False])]
    i = [np.array([12, 10, 6, 0], np.uint8)]
    outs, _ = run(lambda x, y, z: (x & y, x | y, x ^ y, x * y, z & 10, z | x), [a, b, i])
    assert [o[0].dtype for o in outs[:4]] == [np.bool_] * 4
    assert outs[0][0].tolist() == [True, False, False, False]
    assert outs[1][0].tolist() == [True, True, True, False]
    assert outs[2][0].tolist() == [False, True, True, False]
    assert outs[3][0].tolist() == [True, False, False, False]  # bool * bool is logical and
    assert outs[4][0].dtype == np.int32 and outs[4][0].tolist() == [8, 10, 2, 0]
    assert outs[5][0].dtype == np.uint8 and outs[5][0].tolist() == [13, 11, 6, 0]


def test_unary_minus_and_plus():
    a = [np.array([1.5, -2.0], np.float32)]
    outs, _ = run(lambda x: (-x, +x, -(x * 2)), [a])
    assert outs[0][0].tolist() == [-1.5, 2.0]
    assert outs[1][0].tolist() == [1.5, -2.0]
    assert outs[2][0].tolist() == [-3.0, 4.0]


def test_integer_overflow_wraps():
    a = [np.array([200, 255], np.uint8)]
    i = [np.array([2**31 - 1], np.int32)]
    outs, _ = run(lambda x, y: (x * x, x + x, y + 1), [a, i])
    assert outs[0][0].dtype == np.uint8 and outs[0][0].tolist() == [64, 1]
    assert outs[1][0].tolist() == [144, 254]
    assert outs[2][0].tolist() == [-(2**31)]


# --- broadcasting, ragged batches, layouts -------------------------------------------------------


def test_per_sample_scalars_broadcast_against_ragged_tensors():
    imgs = [RNG.integers(0, 255, s).astype(np.uint8) for s in [(4, 5, 3), (2, 7, 3), (1, 1, 3)]]
    scal = [np.array(s, np.float32) for s in (0.5, 2.0, -1.0)]
    legacy = [np.array([s], np.int32) for s in (1, 2, 3)]
    outs, _ = run(lambda x, s, leg: (x * s, x - leg, s + leg), [imgs, scal, legacy])
    for i in range(3):
        np.testing.assert_allclose(outs[0][i], imgs[i] * scal[i], rtol=1e-6)
        assert outs[0][i].dtype == np.float32 and outs[0][i].shape == imgs[i].shape
        np.testing.assert_array_equal(outs[1][i], imgs[i].astype(np.int32) - legacy[i])
        assert outs[2][i].shape == (1,)


def test_numpy_broadcasting_between_samples():
    a = [np.ones((4, 1, 3), np.int32), np.ones((2, 3), np.int32)]
    b = [np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(2, dtype=np.int32).reshape(2, 1)]
    outs, _ = run(lambda x, y: x + y, [a, b])
    assert outs[0][0].shape == (4, 2, 3) and outs[0][1].shape == (2, 3)
    np.testing.assert_array_equal(outs[0][0], a[0] + b[0])
    np.testing.assert_array_equal(outs[0][1], a[1] + b[1])


def test_mismatched_shapes_raise_naming_both():
    a = [np.ones((2, 3, 4), np.float32)]
    b = [np.ones((2, 3, 3), np.float32)]
    with pytest.raises(
        PipelineError, match=r"Can't broadcast shapes:\n2 x 3 x 4 \(d=2\)\n2 x 3 x 3"
    ):
        run(lambda x, y: x + y, [a, b])


def test_tensor_constant_broadcasts_over_channels_and_keeps_layout():
    imgs = [RNG.integers(0, 255, (2, 3, 3)).astype(np.uint8) for _ in range(2)]
    mean = np.float32([10.0, 20.0, 30.0])
    outs, tls = run(
        lambda x: (x - types.Constant(mean), (x * np.float32([1, 2, 3]))[:, :, 0]),
        [imgs],
        layouts={0: "HWC"},
    )
    for i in range(2):
        np.testing.assert_allclose(outs[0][i], imgs[i] - mean)
    assert outs[0][0].dtype == np.float32
    assert tls[0].layout() == "HWC" and tls[1].layout() == "HW"


def test_incompatible_layouts_raise():
    a = [np.ones((2, 3), np.float32)]
    with pytest.raises(ValueError, match="They must be equal or one must be a suffix"):
        run(lambda x, y: x + y, [a, a], layouts={0: "HW", 1: "WH"})


def test_empty_samples():
    outs, _ = run(lambda x: x * 42, [[np.zeros((0, 3), np.float32)]])
    assert outs[0][0].shape == (0, 3)


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", [lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x / y])
def test_arithmetic_on_booleans_only_is_rejected(op):
    b = [np.array([True, False])]
    with pytest.raises(
        PipelineError, match="Inputs to arithmetic operator `.*` cannot be booleans"
    ):
        run(op, [b, b])


def test_unary_minus_of_a_boolean_is_rejected():
    with pytest.raises(
        PipelineError, match="Input to arithmetic operator `.*` cannot be a boolean"
    ):
        run(lambda x: -x, [[np.array([True])]])


def test_bitwise_on_floats_is_rejected():
    f = [np.array([1.0], np.float32)]
    with pytest.raises(PipelineError, match=r"Inputs to bitwise operator `&` must be of integral"):
        run(lambda x: x & 1, [f])


def test_datanode_in_a_list_is_rejected():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        u = fn.random.uniform()
        with pytest.raises(TypeError, match="input 1 of operator `\\+` must be .*nested"):
            _ = u + [u]


def test_truth_value_of_a_datanode_raises():
    with pytest.raises(TypeError, match="enable_conditionals=True"):
        bool(DataNode("x", "cpu", None))


def test_python_int_beyond_int32_is_rejected():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        u = fn.random.uniform()
        with pytest.raises(ValueError, match="does not fit in int32"):
            _ = u + 2**40
        with pytest.raises(TypeError, match="not supported"):
            _ = u + "text"


def test_datanodes_stay_hashable_and_unequal_objects():
    a, b = DataNode("a", "cpu", None), DataNode("b", "cpu", None)
    assert len({a, b, a}) == 2 and {a: 1}[a] == 1


# --- one operator per expression tree ------------------------------------------------------------


def _built_ops(pipe):
    pipe.build()
    return [n.op.schema for n in pipe._executor.cpu_ops]


def test_an_expression_tree_is_one_operator():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=1)
    data = [np.array([1.0, 2.0], np.float32), np.array([3.0], np.float32)]
    with pipe:
        x = fn.external_source(source=lambda: data, batch=True)
        y = fn.random.uniform(range=(1, 2))
        out = ((x * 2 + y) / (x - 7)) ** 2
        pipe.set_outputs(out, y)
    assert _built_ops(pipe).count("_arithmetic_generic_op") == 1
    o, yv = pipe.run()
    for i in range(2):
        yy = np.float32(yv.at(i))
        want = ((data[i] * np.float32(2) + yy) / (data[i] - np.float32(7))) ** np.int32(2)
        np.testing.assert_allclose(o.at(i), want, rtol=1e-6)


def test_a_shared_subexpression_is_computed_once_and_kept():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None, seed=1)
    with pipe:
        x = fn.external_source(source=lambda: [np.array([3], np.int32)], batch=True)
        shared = x * 10
        pipe.set_outputs(shared + 1, shared - 1, shared)
    assert _built_ops(pipe).count("_arithmetic_generic_op") == 3
    a, b, c = (o.at(0).tolist() for o in pipe.run())
    assert (a, b, c) == ([31], [29], [30])


def test_quiet_plans_run_without_errstate_and_give_the_same_values():
    """A plan ``quiet`` lets run with no ``np.errstate`` gives the values of the guarded run and
    raises no floating-point warning on wrap-around or NaN inputs; plans that may warn (float
    arithmetic, integer division, casts) are not quiet."""
    import warnings

    from dlpipe.operators.arithmetic import evaluate, plan, quiet

    i32 = np.array([2**31 - 1, -(2**31), 5, 0], np.int32)
    f32 = np.array([np.nan, np.inf, -1.5, 3e38], np.float32)
    cases = [
        (("leq", ("in", 0), ("const", 3, "int32")), ("int32",), [i32]),
        (("add", ("mul", ("const", 2, "int32"), ("in", 0)), ("in", 0)), ("int32",), [i32]),
        (("lt", ("in", 0), ("in", 1)), ("float32", "float32"), [f32, f32[::-1].copy()]),
        (("sub", ("in", 0), ("const", 1, "int32")), ("int32",), [i32]),
    ]
    for expr, dts, inputs in cases:
        steps = plan(expr, dts)
        assert quiet(steps), expr
        with np.errstate(all="ignore"):
            want = evaluate(steps, inputs)
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            got = evaluate(steps, inputs, True)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
    for expr, dts in [
        (("mul", ("in", 0), ("const", 224, "int32")), ("float32",)),
        (("div", ("in", 0), ("in", 1)), ("int32", "int32")),
        (("leq", ("in", 0), ("const", 3, "int32")), ("float32",)),
        (("lt", ("in", 0), ("in", 1)), ("float16", "float16")),
        (("add", ("in", 0), ("in", 1)), ("int8", "int32")),
        (("eq", ("in", 0), ("const", 0.5, "float32")), ("int32",)),
    ]:
        assert not quiet(plan(expr, dts)), expr
    with warnings.catch_warnings():  # what the guard is for: float overflow is silent
        warnings.simplefilter("error")
        steps = plan(("mul", ("in", 0), ("const", 224, "int32")), ("float32",))
        assert np.isinf(evaluate(steps, [f32])[3])
