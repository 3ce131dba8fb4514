"""DALI's input sets: ``fn.op([a, b], ...)`` applies one call to each set with the same
arguments and random draws (nnU-Net crops an image and its label this way)."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops

RNG = np.random.default_rng(0)
IMAGES = [RNG.integers(0, 255, (20 + i, 30, 3), dtype=np.uint8) for i in range(3)]


def _pipe(build):
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None, seed=3)
    with pipe:
        a = fn.external_source(source=lambda: IMAGES)
        b = fn.external_source(source=lambda: [x[..., ::-1].copy() for x in IMAGES])
        pipe.set_outputs(*build(a, b))
    return pipe


def test_random_operator_draws_the_same_for_every_set():
    pipe = _pipe(lambda a, b: fn.random_resized_crop([a, b], size=(8, 8)))
    for _ in range(3):  # b is a with its channels reversed: so are the crops
        x, y = pipe.run()
        for i in range(3):
            np.testing.assert_array_equal(np.asarray(x.at(i))[..., ::-1], np.asarray(y.at(i)))
    assert not np.array_equal(np.asarray(x.at(0)), np.asarray(x.at(1)))  # still random


def test_legacy_ops_and_several_outputs():
    resize = ops.Resize(size=(5, 6), save_attrs=True)
    pipe = _pipe(lambda a, b: [n for outs in resize([a, b]) for n in outs])
    ya, yb, sa, sb = pipe.run()  # (outputs of set a, set b) for output 0, then output 1
    assert np.asarray(ya.at(0)).shape == (5, 6, 3) == np.asarray(yb.at(0)).shape
    assert np.asarray(sa.at(2)).tolist() == [22, 30] == np.asarray(sb.at(2)).tolist()


def test_sets_of_different_lengths_are_refused():
    with pytest.raises(ArgumentError, match="input sets must be non-empty lists of one length"):
        _pipe(lambda a, b: fn.crop([a, b], [a], crop=(4, 4)))


def test_plain_values_as_inputs_become_constants():
    """``fn.slice(fn.shapes(x), 1, 1, axes=(0,))`` (NeMo): numbers and numpy arrays given as
    positional inputs are constant nodes, as in DALI."""

    def build(a, b):
        return (
            fn.slice(a, 1, 2, axes=[0]),
            fn.slice(fn.shapes(a), 1, 1, axes=(0,)),
            fn.slice(b, np.array([0.5], np.float32), np.array([0.5], np.float32), axes=[1]),
        )

    rows, width, right = _pipe(build).run()
    np.testing.assert_array_equal(np.asarray(rows.at(0)), IMAGES[0][1:3])
    assert np.asarray(width.at(1)).tolist() == [30]
    assert np.asarray(right.at(2)).shape == (22, 15, 3)
