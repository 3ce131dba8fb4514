"""dlpipe.math (DALI's nvidia.dali.math) on the CPU: values against numpy, DALI's dtype rules
(integers give float32 for the float functions, abs keeps the type, min/max/pow/clamp promote),
and the errors on booleans."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import Pipeline, PipelineError, fn, math, types

RNG = np.random.default_rng(5)


def run(build, inputs):
    pipe = Pipeline(batch_size=len(inputs[0]), num_threads=2, device_id=None, seed=1)
    with pipe:
        srcs = [fn.external_source(source=(lambda b=b: b), batch=True) for b in inputs]
        outs = build(*srcs)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    return [[np.asarray(tl.at(i)) for i in range(len(tl))] for tl in pipe.run()]


UNARY = [
    ("sqrt", np.sqrt, (1, 20)),
    ("rsqrt", lambda x: 1 / np.sqrt(x), (1, 20)),
    ("cbrt", np.cbrt, (-20, 20)),
    ("exp", np.exp, (-5, 5)),
    ("log", np.log, (1, 20)),
    ("log2", np.log2, (1, 20)),
    ("log10", np.log10, (1, 20)),
    ("fabs", np.fabs, (-20, 20)),
    ("floor", np.floor, (-20, 20)),
    ("ceil", np.ceil, (-20, 20)),
    ("sin", np.sin, (-20, 20)),
    ("cos", np.cos, (-20, 20)),
    ("tan", np.tan, (-1, 1)),
    ("asin", np.arcsin, (-1, 1)),
    ("acos", np.arccos, (-1, 1)),
    ("atan", np.arctan, (-20, 20)),
    ("sinh", np.sinh, (-5, 5)),
    ("cosh", np.cosh, (-5, 5)),
    ("tanh", np.tanh, (-5, 5)),
    ("asinh", np.arcsinh, (-20, 20)),
    ("acosh", np.arccosh, (1, 20)),
    ("atanh", np.arctanh, (-0.9, 0.9)),
]


@pytest.mark.parametrize("dtype", ["int16", "uint8", "float32", "float64"])
def test_unary_functions_values_and_types(dtype):
    dt = np.dtype(dtype)
    inputs = []
    for _, _, (lo, hi) in UNARY:
        if dt.kind == "f":
            inputs.append(
                [RNG.uniform(lo, hi, (3, 4)).astype(dt), RNG.uniform(lo, hi, 5).astype(dt)]
            )
        else:
            lo, hi = int(np.ceil(lo)), int(np.floor(hi))
            lo = max(lo, 0) if dt.kind == "u" else lo
            inputs.append([RNG.integers(lo, hi + 1, (3, 4)).astype(dt) for _ in range(2)])
    names = [n for n, _, _ in UNARY]
    outs = run(
        lambda *xs: tuple(getattr(math, n)(x) for n, x in zip(names, xs, strict=True)), inputs
    )
    want_dt = np.float32 if dt.kind != "f" else dt
    for (name, ref, _), inp, out in zip(UNARY, inputs, outs, strict=True):
        for x, got in zip(inp, out, strict=True):
            assert got.dtype == want_dt, name
            with np.errstate(all="ignore"):
                np.testing.assert_allclose(got, ref(x.astype(want_dt)), rtol=2e-6, err_msg=name)


def test_abs_keeps_the_type():
    a = [np.array([-3, 4, -128], np.int8)]
    u = [np.array([0, 200], np.uint8)]
    f = [np.array([-0.5, 2.0], np.float16)]
    outs = run(lambda x, y, z: (math.abs(x), math.abs(y), math.abs(z)), [a, u, f])
    assert outs[0][0].dtype == np.int8 and outs[0][0].tolist() == [3, 4, -128]  # wraps, as C
    assert outs[1][0].dtype == np.uint8 and outs[1][0].tolist() == [0, 200]
    assert outs[2][0].dtype == np.float16 and outs[2][0].tolist() == [0.5, 2.0]


def test_binary_and_ternary_functions():
    a = [np.array([1, -5, 7, 0], np.int32)]
    b = [np.array([3, 254, 2, 0], np.uint8)]
    f = [np.array([0.5, -1.5, 2.0, 9.0], np.float32)]
    outs = run(
        lambda x, y, z: (
            math.min(x, y),
            math.max(x, z),
            math.pow(x, 2),
            math.fpow(x, y),
            math.atan2(x, z),
            math.clamp(x, -1, 5),
            math.clamp(z, 1, 0),  # lo > hi: hi wins, as numpy's clip
            math.clamp(x, y, types.Constant(4, dtype=types.INT8)),
        ),
        [a, b, f],
    )
    x, y, z = a[0], b[0], f[0]
    mn, mx, pw, fp, at, cl, inv, cl3 = (o[0] for o in outs)
    assert mn.dtype == np.int32 and mn.tolist() == np.minimum(x, y.astype(np.int32)).tolist()
    assert mx.dtype == np.float32 and mx.tolist() == np.maximum(x, z).tolist()
    assert pw.dtype == np.int32 and pw.tolist() == [1, 25, 49, 0]
    assert fp.dtype == np.float32
    with np.errstate(over="ignore"):  # (-5) ** 254 is inf in float32 on both sides
        np.testing.assert_allclose(fp, np.power(x.astype(np.float32), y.astype(np.float32)))
    np.testing.assert_allclose(at, np.arctan2(x.astype(np.float32), z), rtol=1e-6)
    assert cl.dtype == np.int32 and cl.tolist() == [1, -1, 5, 0]
    assert inv.tolist() == np.clip(z, 1, 0).tolist()
    assert cl3.dtype == np.int32 and cl3.tolist() == [3, 4, 4, 0]  # lo=254 then hi=4


def test_atan2_of_integers_and_fpow_of_floats():
    a = [np.array([1, -1], np.int8)]
    h = [np.array([2.0, 3.0], np.float16)]
    outs = run(lambda x, y: (math.atan2(x, x), math.fpow(y, 2)), [a, h])
    assert outs[0][0].dtype == np.float32
    np.testing.assert_allclose(outs[0][0], [np.pi / 4, -3 * np.pi / 4], rtol=1e-6)
    assert outs[1][0].dtype == np.float16 and outs[1][0].tolist() == [4.0, 9.0]


@pytest.mark.parametrize("f", [math.sqrt, math.exp, math.abs, math.floor])
def test_functions_of_booleans_are_rejected(f):
    with pytest.raises(
        PipelineError, match="Input to arithmetic operator `.*` cannot be a boolean"
    ):
        run(f, [[np.array([True, False])]])


def test_min_of_two_booleans_is_rejected_but_bitwise_is_not():
    b = [np.array([True, False])]
    with pytest.raises(PipelineError, match="cannot be booleans"):
        run(math.min, [b, b])


def test_a_function_needs_a_datanode():
    with pytest.raises(TypeError, match="at least one input of `sqrt` must be a DataNode"):
        math.sqrt(4.0)
