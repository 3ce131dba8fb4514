"""fn.copy, fn.cast_like and fn.element_extract against numpy, in pipelines."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.element_extract import ElementExtract


def _pipe(batches, layouts, build):
    pipe = Pipeline(batch_size=len(batches[0]), num_threads=1, device_id=None)
    with pipe:
        nodes = [
            fn.external_source(source=lambda b=b: b, batch=True, layout=lay)
            for b, lay in zip(batches, layouts, strict=True)
        ]
        out = build(*nodes)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe.run()


def test_copy_is_a_copy_with_the_layout():
    batch = [np.arange(6, dtype=np.int16).reshape(2, 3).T, np.ones((1, 4), np.int16)]
    (out,) = _pipe([batch], ["HW"], lambda d: fn.copy(d))
    assert out.layout() == "HW"
    for i, x in enumerate(batch):
        np.testing.assert_array_equal(out.at(i), x)
        assert not np.shares_memory(out.at(i), x)


def test_cast_like_takes_the_second_inputs_type():
    x = [np.array([0.4, 1.5, 300.2, -2.5], np.float32)]
    like = [np.zeros(1, np.uint8)]
    (out,) = _pipe([x, like], ["", ""], lambda a, b: ops.CastLike()(a, b))
    np.testing.assert_array_equal(out.at(0), [0, 2, 255, 0])  # DALI's round-half-away + clamp
    assert out.at(0).dtype == np.uint8
    (out,) = _pipe([like, x], ["", ""], lambda a, b: fn.cast_like(a, b))
    assert out.at(0).dtype == np.float32


def test_element_extract():
    seqs = [np.arange(4 * 2 * 3, dtype=np.uint8).reshape(4, 2, 3), np.ones((3, 5, 3), np.uint8)]
    first, last = _pipe([seqs], ["FWC"], lambda d: fn.element_extract(d, element_map=[0, 2]))
    assert first.layout() == "WC" and last.layout() == "WC"
    for i, x in enumerate(seqs):
        np.testing.assert_array_equal(first.at(i), x[0])
        np.testing.assert_array_equal(last.at(i), x[2])


def test_element_extract_errors():
    with pytest.raises(ArgumentError, match="element_map is required"):
        ElementExtract()
    with pytest.raises(ArgumentError, match="must begin with 'F'"):
        ElementExtract(element_map=[0]).output_layouts(["HWC"])
    with pytest.raises(ArgumentError, match="index 3 is out of range"):
        ElementExtract(element_map=[3]).run_sample((np.zeros((3, 2)),), {}, None)
