"""fn.squeeze and fn.expand_dims: shapes against numpy, layouts, views, and DALI's errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.expand_dims import ExpandDims
from dlpipe.operators.squeeze import Squeeze


def run(cls, x, in_layout, **kw):
    op = cls(**kw)
    lay = op.output_layouts([in_layout])[0]
    return op.run_sample((x,), {}, None), lay


X = np.arange(12, dtype=np.float32).reshape(1, 3, 1, 4)


@pytest.mark.parametrize(
    "kw, layout, shape, out_layout",
    [
        (dict(axes=[0]), "FHCW", (3, 1, 4), "HCW"),
        (dict(axes=[0, 2]), "FHCW", (3, 4), "HW"),
        (dict(axes=[-2]), "FHCW", (1, 3, 4), "FHW"),
        (dict(axis_names="FC"), "FHCW", (3, 4), "HW"),
        (dict(axes=[2, 0]), "", (3, 4), ""),
    ],
)
def test_squeeze(kw, layout, shape, out_layout):
    out, lay = run(Squeeze, X, layout, **kw)
    np.testing.assert_array_equal(out, X.reshape(shape))
    assert lay == out_layout and np.shares_memory(out, X)


def test_squeeze_errors():
    with pytest.raises(ArgumentError, match="missing argument"):
        Squeeze()
    with pytest.raises(ArgumentError, match="provided both"):
        Squeeze(axes=[0], axis_names="F")
    with pytest.raises(ArgumentError, match="their extents must be 1"):
        run(Squeeze, X, "FHCW", axes=[1])
    with pytest.raises(ArgumentError, match="out of range"):
        run(Squeeze, X, "", axes=[4])
    with pytest.raises(ArgumentError, match="'D' is not in the input layout"):
        run(Squeeze, X, "FHCW", axis_names="D")
    with pytest.raises(ArgumentError, match="twice"):
        run(Squeeze, X, "FHCW", axes=[0, -4])
    # an empty sample may lose a zero axis: the volume stays 0
    out, _ = run(Squeeze, np.zeros((0, 1)), "", axes=[1])
    assert out.shape == (0,)


Y = np.arange(6, dtype=np.int16).reshape(2, 3)


@pytest.mark.parametrize(
    "kw, layout, shape, out_layout",
    [
        (dict(axes=[0]), "HW", (1, 2, 3), ""),
        (dict(axes=[0], new_axis_names="C"), "HW", (1, 2, 3), "CHW"),
        (dict(axes=[2], new_axis_names="C"), "HW", (2, 3, 1), "HWC"),
        (dict(axes=[3, 0], new_axis_names="XF"), "HW", (1, 2, 3, 1), "FHWX"),
        (dict(axes=1), "", (2, 1, 3), ""),
    ],
)
def test_expand_dims(kw, layout, shape, out_layout):
    out, lay = run(ExpandDims, Y, layout, **kw)
    np.testing.assert_array_equal(out, Y.reshape(shape))
    assert lay == out_layout


def test_expand_dims_scalar_gets_the_new_names():
    out, lay = run(ExpandDims, np.float32(3.0).reshape(()), "", axes=[0], new_axis_names="C")
    assert out.shape == (1,) and lay == "C"


def test_expand_dims_errors():
    with pytest.raises(ArgumentError, match="axes is required"):
        ExpandDims()
    with pytest.raises(ArgumentError, match="can't be negative"):
        ExpandDims(axes=[-1])
    with pytest.raises(ArgumentError, match="duplicate"):
        ExpandDims(axes=[1, 1])
    with pytest.raises(ArgumentError, match="contains 1 dimension names"):
        ExpandDims(axes=[0, 1], new_axis_names="C")
    with pytest.raises(ArgumentError, match="requires an input with a proper layout"):
        run(ExpandDims, Y, "", axes=[0], new_axis_names="C")
    with pytest.raises(ArgumentError, match="out of range|not enough dimensions"):
        run(ExpandDims, Y, "", axes=[5])


def test_pipeline():
    batch = [np.zeros((4, 5, 1), np.uint8), np.ones((2, 3, 1), np.uint8)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        d = fn.external_source(source=lambda: batch, batch=True, layout="HWC")
        hw = fn.squeeze(d, axis_names="C")
        pipe.set_outputs(hw, ops.ExpandDims(axes=[0], new_axis_names="F")(hw))
    hw, fhw = pipe.run()
    assert hw.layout() == "HW" and fhw.layout() == "FHW"
    assert hw.shape() == [(4, 5), (2, 3)] and fhw.shape() == [(1, 4, 5), (1, 2, 3)]
