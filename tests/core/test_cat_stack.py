"""fn.cat and fn.stack: numpy concatenate/stack on ragged batches, axis/axis_name, layouts,
skipped empty inputs, and the errors DALI raises."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.cat import Cat
from dlpipe.operators.stack import Stack


def run(cls, batches, layouts=None, **kw):
    op = cls(**kw)
    lay = op.output_layouts(layouts or [""] * len(batches))[0]
    return op.run_batch_cpu([[np.asarray(x) for x in b] for b in batches], {}, None)[0], lay


def ragged(seed, n=3, extra=0):
    rng = np.random.default_rng(seed)
    return [
        rng.integers(0, 99, (int(h) + extra, 4)).astype(np.int32) for h in rng.integers(1, 5, n)
    ]


def test_cat_axis0_ragged():
    a, b = ragged(1), ragged(2)
    out, lay = run(Cat, [a, b], ["NX", ""])
    assert lay == "NX"
    for o, x, y in zip(out, a, b, strict=True):
        np.testing.assert_array_equal(o, np.concatenate([x, y], 0))


def test_cat_axis_name_and_negative_axis():
    a = [np.ones((2, 3), np.float32)]
    b = [np.zeros((2, 5), np.float32)]
    out, lay = run(Cat, [a, b], ["HW", "HW"], axis_name="W")
    np.testing.assert_array_equal(out[0], np.concatenate([a[0], b[0]], 1))
    out, _ = run(Cat, [a, b], axis=-1)
    assert out[0].shape == (2, 8)


def test_cat_skips_inputs_empty_in_the_whole_batch():
    a = [np.ones((2, 3), np.int16)]
    empty = [np.zeros((0, 7), np.int16)]  # mismatched width, but empty: skipped as in DALI
    out, _ = run(Cat, [empty, a, empty])
    np.testing.assert_array_equal(out[0], a[0])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack(axis):
    a, b, c = ragged(3), ragged(3), ragged(3)
    out, lay = run(Stack, [a, b, c], axis=axis)
    assert lay == ""
    for i in range(3):
        np.testing.assert_array_equal(out[i], np.stack([a[i], b[i], c[i]], axis))


@pytest.mark.parametrize("axis, want", [(0, "CHW"), (1, "HCW"), (2, "HWC")])
def test_stack_axis_name_inserts_into_the_layout(axis, want):
    x = [np.ones((2, 3), np.uint8)]
    out, lay = run(Stack, [x, x, x], ["HW"] * 3, axis=axis, axis_name="C")
    assert lay == want and out[0].shape == np.stack([x[0]] * 3, axis).shape


def test_stack_scalars_get_the_axis_name():
    s = [np.array(1.0, np.float32), np.array(2.0, np.float32)]
    out, lay = run(Stack, [s, s], axis_name="X")
    assert lay == "X"
    np.testing.assert_array_equal(out[1], [2.0, 2.0])


@pytest.mark.parametrize(
    "cls, batches, kw, layouts, match",
    [
        (Cat, [[np.ones((2, 3))], [np.ones((3, 4))]], {}, None, "all extents but axis 0"),
        (Stack, [[np.ones((2, 3))], [np.ones((2, 4))]], {}, None, "all extents"),
        (Cat, [[np.ones(2)], [np.ones((2, 1))]], {}, None, "same number of dimensions"),
        (Cat, [[np.ones(2, np.int32)], [np.ones(2, np.int64)]], {}, None, "same type"),
        (Cat, [[np.ones(2)]], dict(axis=1), None, "invalid axis"),
        (Stack, [[np.ones(2)]], dict(axis=2), None, "invalid axis"),
        (Cat, [[np.ones(2)], [np.ones(2)]], {}, ["AB", "CD"], "layouts must match"),
        (Cat, [[np.ones(2)]], dict(axis_name="W"), ["H"], "undefined axis 'W'"),
        (Stack, [[np.ones(2)]], dict(axis_name="C"), None, "non-empty input layout"),
    ],
)
def test_errors(cls, batches, kw, layouts, match):
    with pytest.raises(ArgumentError, match=match):
        run(cls, batches, layouts, **kw)


def test_build_errors():
    with pytest.raises(ArgumentError, match="cannot be used together"):
        Cat(axis=0, axis_name="H")
    with pytest.raises(ArgumentError, match="single character"):
        Stack(axis_name="CH")
    with pytest.raises(ArgumentError, match="axis=0.5"):
        Cat(axis=0.5)


def test_pipeline():
    a, b = ragged(4), ragged(5)
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(source=lambda: a, batch=True, layout="NX")
        y = fn.external_source(source=lambda: b, batch=True, layout="NX")
        pipe.set_outputs(fn.cat(x, y), ops.Stack(axis=0)(x, x))
    c, s = pipe.run()
    assert c.layout() == "NX" and s.layout() == ""
    for i in range(3):
        np.testing.assert_array_equal(c.at(i), np.concatenate([a[i], b[i]]))
        np.testing.assert_array_equal(s.at(i), np.stack([a[i], a[i]]))
