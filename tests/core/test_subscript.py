"""Tensor subscripts (``x[0]``, ``x[1:3]``, ``x[:, ::2]``, ``x[..., 0]``, ``dlpipe.newaxis``,
DataNode bounds) on the CPU against numpy indexing, layouts, errors; and the strided-view
arithmetic the GPU side uses (``subscript_view``) against numpy on the host."""

from __future__ import annotations

import numpy as np
import pytest

import dlpipe
from dlpipe import Pipeline, PipelineError, fn, types
from dlpipe.operators.subscript import subscript_view

RNG = np.random.default_rng(1)
SAMPLES = [RNG.integers(0, 100, s).astype(np.int16) for s in [(4, 5, 3), (2, 7, 3), (6, 1, 3)]]


def run(build, inputs=None, layout=""):
    inputs = inputs if inputs is not None else SAMPLES
    pipe = Pipeline(batch_size=len(inputs), num_threads=2, device_id=None, seed=2)
    with pipe:
        x = fn.external_source(source=lambda: inputs, batch=True, layout=layout or None)
        outs = build(x)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    tls = pipe.run()
    return [[np.asarray(tl.at(i)) for i in range(len(tl))] for tl in tls], tls


CASES = [
    ("x[0]", lambda x: x[0], lambda a: a[0]),
    ("x[-1]", lambda x: x[-1], lambda a: a[-1]),
    ("x[1:3]", lambda x: x[1:3], lambda a: a[1:3]),
    ("x[:, ::2]", lambda x: x[:, ::2], lambda a: a[:, ::2]),
    ("x[::-1, 1:]", lambda x: x[::-1, 1:], lambda a: a[::-1, 1:]),
    ("x[..., 0]", lambda x: x[..., 0], lambda a: a[..., 0]),
    ("x[1, ..., 2]", lambda x: x[1, ..., 2], lambda a: a[1, ..., 2]),
    ("x[:, -1, 1:2]", lambda x: x[:, -1, 1:2], lambda a: a[:, -1, 1:2]),
    ("x[-100:100]", lambda x: x[-100:100], lambda a: a[-100:100]),
    ("x[:, :, ::-2]", lambda x: x[:, :, ::-2], lambda a: a[:, :, ::-2]),
    ("x[0, 0, 0]", lambda x: x[0, 0, 0], lambda a: a[0, 0, 0]),
    ("x[newaxis]", lambda x: x[dlpipe.newaxis], lambda a: a[np.newaxis]),
    ("x[:, newaxis, 0]", lambda x: x[:, dlpipe.newaxis, 0], lambda a: a[:, np.newaxis, 0]),
    ("x[..., newaxis]", lambda x: x[..., dlpipe.newaxis], lambda a: a[..., np.newaxis]),
    ("x[None]", lambda x: x[None], lambda a: a[:]),  # DALI: None is a whole-range slice
]


@pytest.mark.parametrize("name, sub, ref", CASES, ids=[c[0] for c in CASES])
def test_subscripts_match_numpy(name, sub, ref):
    outs, _ = run(sub)
    for a, got in zip(SAMPLES, outs[0], strict=True):
        want = np.asarray(ref(a))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_reader_labels_first_element_is_a_scalar(make_files):
    root, _ = make_files(6, classes=3)
    pipe = Pipeline(batch_size=6, num_threads=1, device_id=None, seed=1)
    with pipe:
        _, labels = fn.readers.file(file_root=root, name="Reader")
        pipe.set_outputs(labels, labels[0])
    labels, first = pipe.run()
    for i in range(6):
        assert first.at(i).shape == () and first.at(i).dtype == np.int32
        assert first.at(i) == labels.at(i)[0]


def test_datanode_bounds_per_sample():
    hs = [np.array(v, np.int64) for v in (1, 2, 5)]
    ws = [np.array(v, np.int32) for v in (3, -1, 1)]

    def build(x):
        h = fn.external_source(source=lambda: hs, batch=True)
        w = fn.external_source(source=lambda: ws, batch=True)
        return x[:h, :w], x[h - 1], x[:, w:, h % 2 :]

    outs, _ = run(build)
    for i, a in enumerate(SAMPLES):
        h, w = int(hs[i]), int(ws[i])
        np.testing.assert_array_equal(outs[0][i], a[:h, :w])
        np.testing.assert_array_equal(outs[1][i], a[h - 1])
        np.testing.assert_array_equal(outs[2][i], a[:, w:, h % 2 :])


def test_index_from_the_data_shape():
    def build(x):
        return x[:, : x.shape()[1] - 1], x.shape(), x.shape(dtype=types.INT32)[-1]

    outs, _ = run(build)
    for i, a in enumerate(SAMPLES):
        np.testing.assert_array_equal(outs[0][i], a[:, : a.shape[1] - 1])
        assert outs[1][i].dtype == np.int64 and outs[1][i].tolist() == list(a.shape)
        assert outs[2][i].dtype == np.int32 and outs[2][i] == 3


def test_layouts_follow_the_kept_dimensions():
    cases = {
        "first_row": (lambda x: x[0], "WC"),
        "last_col": (lambda x: x[:, -1], "HC"),
        "red": (lambda x: x[:, :, 0], "HW"),
        "slices": (lambda x: x[1:, ::2], "HWC"),
        "video": (lambda x: x[dlpipe.newaxis("F")], "FHWC"),
        "unnamed": (lambda x: x[dlpipe.newaxis], ""),
        "ellipsis": (lambda x: x[..., 1], "HW"),
    }
    _, tls = run(lambda x: tuple(f(x) for f, _ in cases.values()), layout="HWC")
    assert [tl.layout() for tl in tls] == [want for _, want in cases.values()]


def test_out_of_range_index_names_the_index_and_shape():
    with pytest.raises(PipelineError, match=r"Index 4 is out of range for axis 0 of length 4.*"
                       r"shape \(4, 5, 3\)"):  # fmt: skip
        run(lambda x: x[4])
    with pytest.raises(PipelineError, match=r"Index -8 is out of range for axis 1 of length 5"):
        run(lambda x: x[:, -8])


def test_too_many_indices_and_scalars():
    with pytest.raises(PipelineError, match=r"Too many indices \(4\) for a 3D tensor"):
        run(lambda x: x[0, 0, 0, 0])
    with pytest.raises(PipelineError, match="Cannot apply an index to a scalar"):
        run(lambda x: x[0, 0, 0][0])


def test_bad_runtime_indices():
    floats = [np.array(1.0, np.float32)] * 3
    vectors = [np.array([1], np.int32)] * 3
    with pytest.raises(PipelineError, match="Array index must be of integral type"):
        run(lambda x: x[fn.external_source(source=lambda: floats, batch=True)])
    with pytest.raises(PipelineError, match=r"Array indices must be scalar \(0D\). Got 1D"):
        run(lambda x: x[fn.external_source(source=lambda: vectors, batch=True)])


def test_bad_static_indices():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        x = fn.random.uniform(shape=(3,))
        with pytest.raises(TypeError, match="Invalid type for an index"):
            _ = x[1.5]
        with pytest.raises(ValueError, match="single ellipsis"):
            _ = x[..., ...]
        with pytest.raises(ValueError, match="specified for all axes or none"):
            _ = x[dlpipe.newaxis("A"), dlpipe.newaxis]
        with pytest.raises(ValueError, match="single-character"):
            dlpipe.newaxis("AB")
    with pytest.raises(PipelineError, match="step cannot be zero"):
        run(lambda x: x[::0])


def test_fn_tensor_subscript_directly():
    outs, _ = run(lambda x: fn.tensor_subscript(x, at_0=1, lo_1=1, hi_1=3, num_subscripts=2))
    for a, got in zip(SAMPLES, outs[0], strict=True):
        np.testing.assert_array_equal(got, a[1, 1:3])


@pytest.mark.parametrize("index", [
    (0,), (slice(1, 3),), (slice(None, None, -1), 1), (Ellipsis, 0), (None, 1, Ellipsis),
    (slice(None), None, slice(None, None, -2)), (1, 2, 0), (slice(5, 1, -2),), (slice(3, 3),),
])  # fmt: skip
def test_subscript_view_matches_numpy_on_strided_input(index):
    base = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)
    x = base[:, ::2, 1:]  # a non-contiguous sample
    strides = [s // x.itemsize for s in x.strides]
    offset, shape, out_strides = subscript_view(x.shape, strides, index)
    want = x[index]
    assert shape == want.shape
    flat = base.reshape(-1)
    start = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // 4
    got = np.zeros(shape, np.int32)
    for idx in np.ndindex(*shape):
        got[idx] = flat[start + offset + sum(i * s for i, s in zip(idx, out_strides, strict=True))]
    np.testing.assert_array_equal(got, want)
