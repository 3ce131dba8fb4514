"""Host side of the GPU launchers' row folding (kernels/_batch.py ``fold_layout``): the
(H, W[, C]) view of FHWC / DHWC / fewer-dimension samples addresses the same elements as the
samples, checked by reading a numpy buffer through both sets of strides."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.kernels._batch import c_strides, fold_layout


def _read(buf: np.ndarray, offset: int, shape, strides) -> np.ndarray:
    """The elements of ``buf`` that a sample at ``offset`` with ``shape``/``strides`` (in
    elements) holds, in C order."""
    idx = np.full(tuple(int(s) for s in shape), offset, np.int64)
    for d, (n, st) in enumerate(zip(shape, strides, strict=True)):
        ax = np.arange(int(n), dtype=np.int64) * int(st)
        idx = idx + ax.reshape((-1,) + (1,) * (len(shape) - d - 1))
    return buf[idx]


@pytest.mark.parametrize(
    "shapes, ndim",
    [
        ([(3, 13, 14, 3), (2, 9, 14, 3)], 3),  # FHWC
        ([(2, 4, 5, 6, 3)], 3),  # FDHWC: two leading dimensions fold
        ([(5, 7, 3)], 3),  # HWC: as it is
        ([(7, 3), (4, 3)], 3),  # W C: one row
        ([(3,)], 3),  # one pixel
        ([(4, 6, 5)], 2),  # F H W as rows of H W
        ([(9,)], 2),
    ],
)
def test_folded_view_reads_the_same_elements(shapes, ndim):
    rng = np.random.default_rng(0)
    buf = rng.integers(0, 1000, 4000)
    shp = np.array(shapes, np.int64)
    st = c_strides(shp)
    for i, s in enumerate(shapes):
        np.testing.assert_array_equal(st[i], np.array(np.empty(s).strides) // 8)
    offsets = [0, 1500]
    fshapes, fstrides = fold_layout(shp, st, ndim)
    assert fshapes.shape == (len(shapes), ndim) and fstrides.shape == fshapes.shape
    for i, s in enumerate(shapes):
        whole = _read(buf, offsets[i], s, st[i])
        view = _read(buf, offsets[i], fshapes[i], fstrides[i])
        keep = min(ndim - 1, len(s))  # the trailing dimensions stay, the others are rows
        assert view.shape[ndim - keep :] == tuple(s[len(s) - keep :])
        assert view.shape[0] == int(np.prod(s[: len(s) - keep]))
        np.testing.assert_array_equal(view.reshape(-1), whole.reshape(-1))
        if len(s) > ndim:  # the rows of the view: the frames' rows, one after the other
            np.testing.assert_array_equal(view, whole.reshape(-1, *s[len(s) - ndim + 1 :]))


def test_a_strided_view_is_not_folded():
    # frames 0 and 2 of a (3, 4, 5, 3) array: frame stride 2 * 60, row stride 15
    shp = np.array([[2, 4, 5, 3]], np.int64)
    st = np.array([[120, 15, 3, 1]], np.int64)
    assert fold_layout(shp, st, 3) is None
    # a crop of rows inside each frame folds neither (frame stride 60, rows 2 of 4)
    assert fold_layout(np.array([[3, 2, 5, 3]]), np.array([[60, 15, 3, 1]]), 3) is None
    # padded pixels (channel stride 1, pixel stride 4) still fold: only leading dims matter
    shapes, strides = fold_layout(np.array([[3, 4, 5, 3]]), np.array([[80, 20, 4, 1]]), 3)
    np.testing.assert_array_equal(shapes, [[12, 5, 3]])
    np.testing.assert_array_equal(strides, [[20, 4, 1]])


def test_c_strides():
    np.testing.assert_array_equal(
        c_strides(np.array([[2, 3, 4], [5, 1, 2]])), [[12, 4, 1], [2, 2, 1]]
    )
    np.testing.assert_array_equal(c_strides(np.array([[7]])), [[1]])
