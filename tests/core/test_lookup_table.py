"""fn.lookup_table: DALI's documented example, out-of-table keys, dtypes, errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, types
from dlpipe.operators.lookup_table import LookupTable


def test_dali_documentation_example():
    op = LookupTable(
        keys=[0, 2, 3, 4, 5, 3], values=[0.2, 0.4, 0.5, 0.6, 0.7, 0.10], default_value=0.99
    )
    x = np.array([1, 4, 1, 0, 100, 2, 3, 4], np.int32)
    out = op.run_sample((x,), {}, None)
    np.testing.assert_array_equal(out, np.float32([0.99, 0.6, 0.99, 0.2, 0.99, 0.4, 0.10, 0.6]))
    assert out.dtype == np.float32


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint16, np.uint64])
def test_keys_outside_the_table_get_the_default(dtype):
    op = LookupTable(keys=[1, 65535], values=[5, 6], default_value=-1, dtype=types.INT16)
    info = np.iinfo(dtype)
    x = np.array([1, 0, min(info.max, 65535), info.min, info.max], dtype)
    out = op.run_sample((x,), {}, None)
    want = [5 if v == 1 else 6 if v == 65535 else -1 for v in x.astype(object)]
    np.testing.assert_array_equal(out, want)
    assert out.dtype == np.int16


def test_values_convert_with_saturation_and_rounding():
    op = LookupTable(keys=[0, 1, 2], values=[300.0, 2.5, -7.0], dtype=types.UINT8)
    np.testing.assert_array_equal(
        op.run_sample((np.arange(4, dtype=np.uint8),), {}, None), [255, 3, 0, 0]
    )


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(keys=[0, 1], values=[1.0]), "should match"),
        (dict(keys=[70000], values=[1.0]), r"\[0, 65535\]"),
        (dict(keys=[-1], values=[1.0]), r"\[0, 65535\]"),
    ],
)
def test_errors(kw, match):
    with pytest.raises(ArgumentError, match=match):
        LookupTable(**kw)
    with pytest.raises(ArgumentError, match="only integer inputs"):
        LookupTable().run_sample((np.zeros(2, np.float32),), {}, None)


def test_pipeline_keeps_layout():
    batch = [np.array([0, 1, 5], np.int64), np.array([2], np.int64)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        d = fn.external_source(source=lambda: batch, batch=True, layout="X")
        pipe.set_outputs(fn.lookup_table(d, keys=[0, 1, 2], values=[7, 8, 9]))
    (out,) = pipe.run()
    assert out.layout() == "X"
    np.testing.assert_array_equal(out.at(0), [7, 8, 0])
    np.testing.assert_array_equal(out.at(1), [9])
