"""The tensor-manipulation operators on the GPU against the same operators on the CPU, on
random ragged batches: values, dtype, shape and layout."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn, types  # noqa: E402


def ragged(seed, n=5, ndim=3, dtype=np.uint8, lo=1, hi=9, channels=None):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        shape = [int(v) for v in rng.integers(lo, hi, ndim)]
        if channels:
            shape[-1] = channels
        if np.dtype(dtype).kind == "f":
            out.append(rng.normal(0, 50, shape).astype(dtype))
        else:
            info = np.iinfo(dtype)
            out.append(rng.integers(max(info.min, -1000), min(info.max, 1000), shape, dtype=dtype))
    return out


def run_both(batches, build, layout="HWC", extra=()):
    """``build(data_node, *extra_nodes)`` -> output node(s) on CPU and GPU data: a list of
    (gpu, cpu) TensorList pairs (the GPU one copied to the host)."""
    n = len(batches[0])
    pipe = Pipeline(batch_size=n, num_threads=2, device_id=0, prefetch_queue_depth=1)
    with pipe:
        ins = [fn.external_source(source=lambda b=b: b, batch=True, layout=layout) for b in batches]
        extras = [fn.external_source(source=lambda e=e: e, batch=True) for e in extra]
        cpu = build(*ins, *extras)
        gpu = build(*[x.gpu() for x in ins], *extras)
        cpu = list(cpu) if isinstance(cpu, tuple | list) else [cpu]
        gpu = list(gpu) if isinstance(gpu, tuple | list) else [gpu]
        pipe.set_outputs(*gpu, *cpu)
    outs = pipe.run()
    k = len(outs) // 2
    return [(g.as_cpu(), c) for g, c in zip(outs[:k], outs[k:], strict=True)]


def assert_same(pairs, exact=True, atol=0.0):
    for g, c in pairs:
        assert g.layout() == c.layout()
        assert g.dtype == c.dtype
        assert g.shape() == c.shape()
        for i in range(len(c)):
            if exact:
                np.testing.assert_array_equal(g.at(i), c.at(i))
            else:
                np.testing.assert_allclose(g.at(i), c.at(i), atol=atol, rtol=1e-5)


# --- slice ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(rel_start=[0.2, 0.1], rel_shape=[0.5, 0.7]),
        dict(start=[-2, 1], shape=[6, 9], out_of_bounds_policy="pad", fill_values=[1, 2, 3]),
        dict(start=[1, -1], end=[20, 4], out_of_bounds_policy="trim_to_shape"),
        dict(start=[0], end=[2], axes=[2], dtype=types.FLOAT),
        dict(start=[1, 1], shape=[3, 3], out_of_bounds_policy="pad", dtype=types.FLOAT16),
    ],
)
def test_slice_named(kw):
    pairs = run_both([ragged(1, channels=3)], lambda d: fn.slice(d, **kw))
    assert_same(pairs)


def test_slice_positional_inputs_stay_on_the_cpu():
    batch = ragged(2, channels=3)
    anchors = [np.float32(np.random.default_rng(i).uniform(0, 0.5, 2)) for i in range(5)]
    shapes = [np.float32([0.5, 0.5])] * 5
    pairs = run_both([batch], lambda d, a, s: fn.slice(d, a, s), extra=(anchors, shapes))
    assert_same(pairs)


def test_slice_float_to_uint8_truncates_like_the_cpu():
    batch = ragged(3, ndim=2, dtype=np.float32)
    pairs = run_both([batch], lambda d: fn.slice(d, rel_start=[0, 0], dtype=types.UINT8), "HW")
    assert_same(pairs)


def test_slice_4d_int64_and_a_strided_input():
    batch = ragged(4, ndim=4, dtype=np.int64)
    pairs = run_both(
        [batch],
        lambda d: fn.slice(
            d,
            start=[1, 0, 0],
            shape=[2, 3, 1],
            axes=[0, 1, 3],
            out_of_bounds_policy="pad",
            fill_values=-5,
        ),
        "DHWC",
    )
    assert_same(pairs)


# --- transpose -----------------------------------------------------------------------------------


@pytest.mark.parametrize("perm, layout", [([2, 0, 1], "HWC"), ([1, 0, 2], "HWC"), ([0, 1, 2], "")])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int64, np.float16])
def test_transpose(perm, layout, dtype):
    pairs = run_both([ragged(5, dtype=dtype)], lambda d: fn.transpose(d, perm=perm), layout)
    assert_same(pairs)


def test_transpose_4d_output_layout():
    pairs = run_both(
        [ragged(6, ndim=4)],
        lambda d: fn.transpose(d, perm=[3, 0, 2, 1], output_layout="ABCD"),
        "FHWC",
    )
    assert_same(pairs)


# --- reshape, reinterpret, squeeze, expand_dims (metadata only) -----------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(shape=[-1]),
        dict(rel_shape=[1, -1]),
        dict(src_dims=[-1, 0, 1, 2], layout="FHWC"),
        dict(layout="ABC"),
    ],
)
def test_reshape(kw):
    assert_same(run_both([ragged(7, channels=3)], lambda d: fn.reshape(d, **kw)))


def test_reshape_shape_input_and_a_strided_input():
    batch = ragged(8, channels=2)
    shapes = [np.array([x.shape[1], x.shape[0], 2], np.int32) for x in batch]
    pairs = run_both(
        [batch],
        lambda d, s: fn.reshape(fn.transpose(d, perm=[1, 0, 2], transpose_layout=False), s),
        extra=(shapes,),
    )
    assert_same(pairs)


def test_reinterpret_squeeze_expand_dims():
    batch = ragged(9, channels=4)
    assert_same(run_both([batch], lambda d: fn.reinterpret(d, dtype=types.INT32)))
    batch = ragged(10, channels=1, dtype=np.float32)
    assert_same(run_both([batch], lambda d: fn.squeeze(d, axis_names="C")))
    assert_same(run_both([batch], lambda d: fn.expand_dims(d, axes=[0, 4], new_axis_names="FX")))


# --- pad -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(axis_names="W", fill_value=7),
        dict(axes=[0, 1], align=[4, 8], shape=[10, -1], fill_value=-1),
    ],
)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int64])
def test_pad(kw, dtype):
    assert_same(run_both([ragged(11, dtype=dtype, channels=3)], lambda d: fn.pad(d, **kw)))


# --- cat, stack ---------------------------------------------------------------------------------


def _same_rows(seed, n=5, cols=(3, 3, 3), dtype=np.float32):
    """Inputs whose samples share their first extent (per sample), other extents in ``cols``."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 7, n)
    return [[rng.normal(0, 9, (int(r), c)).astype(dtype) for r in rows] for c in cols]


@pytest.mark.parametrize("axis", [0, 1])
def test_cat(axis):
    if axis == 0:
        batches = [ragged(12, ndim=2, channels=4), ragged(13, ndim=2, channels=4)]
    else:
        batches = _same_rows(14, cols=(1, 3, 2))
    assert_same(run_both(batches, lambda *xs: fn.cat(*xs, axis=axis), "HW"))


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int64])
def test_stack(axis, dtype):
    batches = _same_rows(15, cols=(3, 3, 3), dtype=dtype)
    assert_same(run_both(batches, lambda *xs: fn.stack(*xs, axis=axis, axis_name="S"), "HW"))


# --- one_hot -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(num_classes=5),
        dict(num_classes=5, axis=0, dtype=types.UINT8, on_value=3, off_value=1),
        dict(num_classes=7, axis=1, axis_name="K", dtype=types.INT64),
    ],
)
@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.uint8])
def test_one_hot(kw, dtype):
    rng = np.random.default_rng(16)
    batch = [rng.integers(-1, 8, (int(n), 2)).astype(dtype) for n in rng.integers(1, 6, 5)]
    assert_same(run_both([batch], lambda d: fn.one_hot(d, **kw), "NX"))


def test_one_hot_legacy_scalars():
    batch = [np.array([k], np.int64) for k in (0, 3, 9, 2)]
    assert_same(run_both([batch], lambda d: fn.one_hot(d, num_classes=4), ""))


# --- reductions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["min", "max", "sum", "mean", "mean_square", "rms"])
@pytest.mark.parametrize(
    "kw", [dict(), dict(axis_names="HW"), dict(axes=[2], keep_dims=True), dict(axes=[0, 2])]
)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.int64])
def test_reductions(name, kw, dtype):
    batch = ragged(17, dtype=dtype, channels=3, hi=40)  # large and small reductions
    fnc = getattr(fn.reductions, name)
    pairs = run_both([batch], lambda d: fnc(d, **kw))
    exact = name in ("min", "max") or (name == "sum" and dtype != np.float32)
    assert_same(pairs, exact=exact, atol=1e-3)


@pytest.mark.parametrize("name", ["std_dev", "variance"])
@pytest.mark.parametrize("kw", [dict(axis_names="HW"), dict(), dict(axes=[1], ddof=1)])
def test_std_dev_variance(name, kw):
    batch = ragged(18, dtype=np.float32, channels=3, hi=40)

    def build(d):
        mean = fn.reductions.mean(d, **{k: v for k, v in kw.items() if k != "ddof"})
        return getattr(fn.reductions, name)(d, mean, **kw)

    assert_same(run_both([batch], build), exact=False, atol=1e-3)


# --- copy, cast_like, element_extract ------------------------------------------------------------


def test_copy_of_a_strided_batch():
    batch = ragged(19, dtype=np.int16)
    assert_same(run_both([batch], lambda d: fn.copy(fn.transpose(d, perm=[1, 0, 2]))))


def test_cast_like():
    x = ragged(20, dtype=np.float32)
    like = [np.zeros(1, np.int16)] * len(x)
    pairs = run_both([x, like], lambda a, b: fn.cast_like(a, b), "")
    assert_same(pairs, exact=False, atol=1.0)  # the GPU rounds halves to even


def test_element_extract():
    seqs = ragged(21, ndim=4, channels=3)
    pairs = run_both([seqs], lambda d: fn.element_extract(d, element_map=[0, 0]), "FHWC")
    assert_same(pairs)


# --- normalize ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(axes=[0, 1]),
        dict(axis_names="HW", scale=64, shift=128, dtype=types.UINT8),
        dict(axes=[2], epsilon=1.0, ddof=1),
        dict(batch=True, axes=[0, 1]),
        dict(batch=True),
        dict(mean=10.0, stddev=4.0, dtype=types.FLOAT16),
        dict(mean=10.0),
        dict(stddev=0.0),
    ],
)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_normalize(kw, dtype):
    batch = ragged(22, dtype=dtype, channels=3, hi=30)
    pairs = run_both([batch], lambda d: fn.normalize(d, **kw))
    assert_same(pairs, exact=False, atol=1.0 if kw.get("dtype") == types.UINT8 else 1e-3)


def test_normalize_argument_input_tensors():
    batch = ragged(23, dtype=np.float32, channels=3)
    means = [np.float32(np.random.default_rng(i).normal(0, 5, (1, 1, 3))) for i in range(5)]
    stds = [np.float32([[[1.0, 2.0, 4.0]]])] * 5

    def build(d, m, s):
        return fn.normalize(d, mean=m, stddev=s), fn.normalize(d, mean=m)

    assert_same(run_both([batch], build, extra=(means, stds)), exact=False, atol=1e-3)


# --- random on the GPU -------------------------------------------------------------------------


def _random_pair(build_gpu, build_cpu, n=6, inputs=None):
    pipe = Pipeline(batch_size=n, num_threads=2, device_id=0, prefetch_queue_depth=1, seed=9)
    with pipe:
        if inputs is None:
            pipe.set_outputs(build_gpu(), build_cpu())
        else:
            d = fn.external_source(source=lambda: inputs, batch=True, layout="HWC")
            pipe.set_outputs(build_gpu(d.gpu()), build_cpu(d))
    out = []
    for _ in range(2):
        g, c = pipe.run()
        out.append((g.as_cpu(), c))
    return out


@pytest.mark.parametrize(
    "name, kw",
    [
        ("coin_flip", dict(probability=0.3)),
        ("uniform", dict(range=(-2, 5))),
        ("uniform", dict(values=[1, 7, 9], shape=[3, 2])),
        ("normal", dict(mean=2.0, stddev=3.0, shape=4)),
        ("normal", dict(dtype=types.INT16, stddev=50.0)),
    ],
)
def test_random_gpu_draws_what_the_cpu_draws(name, kw):
    op = getattr(fn.random, name)
    pairs = _random_pair(
        lambda: op(device="gpu", seed=5, **kw), lambda: op(device="cpu", seed=5, **kw)
    )
    for g, c in pairs:
        assert g.dtype == c.dtype and g.shape() == c.shape()
        for i in range(len(c)):
            np.testing.assert_array_equal(g.at(i), c.at(i))


def test_random_normal_takes_the_shape_of_a_gpu_input():
    batch = ragged(24, channels=3)
    pairs = _random_pair(
        lambda d: fn.random.normal(d, seed=3),
        lambda d: fn.random.normal(d, seed=3),
        n=len(batch),
        inputs=batch,
    )
    for g, c in pairs:
        assert g.shape() == [x.shape for x in batch]
        for i in range(len(c)):
            np.testing.assert_array_equal(g.at(i), c.at(i))


# --- readers.numpy(device="gpu") ----------------------------------------------------------------


def test_numpy_reader_gpu_matches_cpu(tmp_path):
    rng = np.random.default_rng(25)
    for i in range(6):
        np.save(tmp_path / f"{i:02d}.npy", rng.normal(0, 1, rng.integers(2, 9, 3)).astype("f4"))
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=0, seed=2)
    with pipe:
        kw = dict(
            file_root=str(tmp_path),
            random_shuffle=True,
            seed=4,
            rel_roi_start=[0.25],
            rel_roi_end=[1.0],
            roi_axes=[0],
        )
        g = fn.readers.numpy(device="gpu", name="G", **kw)
        c = fn.readers.numpy(device="cpu", name="C", **kw)
        pipe.set_outputs(g, c)
    assert pipe.reader_meta("G")["epoch_size"] == 6
    for _ in range(3):
        g, c = pipe.run()
        assert_same([(g.as_cpu(), c)])


# --- lookup_table ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64])
@pytest.mark.parametrize("out", [types.FLOAT, types.UINT8, types.FLOAT16, types.BOOL])
def test_lookup_table(dtype, out):
    rng = np.random.default_rng(26)
    batch = [rng.integers(-3, 300, (int(k), 2)).astype(dtype) for k in rng.integers(1, 9, 5)]
    kw = dict(keys=[0, 5, 255, 299], values=[1.5, -2.0, 400.0, 0.0], default_value=9.0, dtype=out)
    assert_same(run_both([batch], lambda d: fn.lookup_table(d, **kw), "NX"))
