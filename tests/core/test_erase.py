"""fn.erase: DALI's documented examples, multiple regions, normalized and centered anchors,
truncation and clipping, axes / axis_names / default axes, per-channel fill, argument inputs,
and errors."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.erase import Erase


def run(x, layout="HWC", args=None, **kwargs):
    op = Erase(**kwargs)
    op.output_layouts([layout])
    out = op.run_sample((x,), args or {}, None)
    assert out.dtype == x.dtype and out.shape == x.shape
    return out


def img(shape=(300, 300, 3), dtype=np.uint8):
    return (np.arange(np.prod(shape)) % 251 + 1).astype(dtype).reshape(shape)


def test_example_1_axis_names():
    x = img()
    out = run(x, anchor=(10, 20), shape=(190, 200), axis_names="HW", fill_value=0)
    ref = x.copy()
    ref[10:200, 20:220] = 0
    np.testing.assert_array_equal(out, ref)


def test_example_2_two_bands_multichannel_fill():
    x = img()
    out = run(x, anchor=(10, 250), shape=(20, 30), axis_names="W", fill_value=(118, 185, 0))
    ref = x.copy()
    ref[:, 10:30] = (118, 185, 0)
    ref[:, 250:280] = (118, 185, 0)
    np.testing.assert_array_equal(out, ref)


def test_example_3_normalized():
    x = img()
    out = run(
        x, anchor=(0.15, 0.15), shape=(0.3, 0.3), axis_names="HW", fill_value=100, normalized=True
    )
    ref = x.copy()
    ref[45:135, 45:135] = 100
    np.testing.assert_array_equal(out, ref)


def test_example_4_normalized_anchor_default_axes():
    x = img()
    out = run(
        x, anchor=(0.15, 0.15), shape=(20, 30), normalized_anchor=True, normalized_shape=False
    )
    ref = x.copy()
    ref[45:65, 45:75] = 0  # no axes given: all but C, in layout order (H, W)
    np.testing.assert_array_equal(out, ref)


def test_truncation_clipping_and_centered():
    x = img((20, 30, 1))
    out = run(x, anchor=(-5.7, 25.9), shape=(8.5, 10.0), axis_names="HW", fill_value=7)
    ref = x.copy()
    ref[0:2, 25:30] = 7  # begin int(-5.7) = -5, end int(2.8) = 2; end int(35.9) = 35 -> 30
    np.testing.assert_array_equal(out, ref)
    out = run(x, anchor=(10, 10), shape=(4, 6), axis_names="HW", centered_anchor=True)
    ref = x.copy()
    ref[8:12, 7:13] = 0
    np.testing.assert_array_equal(out, ref)


def test_axes_and_other_layouts():
    x = img((4, 10, 12), np.float32)
    out = run(x, layout="CHW", anchor=(2, 3), shape=(5, 4), axes=(2, 1), fill_value=-1.5)
    ref = x.copy()
    ref[:, 3:7, 2:7] = -1.5
    np.testing.assert_array_equal(out, ref)
    out = run(
        x,
        layout="CHW",
        anchor=(1, 0, 0),
        shape=(2, 3, 3),
        axis_names="CHW",
        fill_value=(1, 2, 3, 4),
    )
    ref = x.copy()
    ref[1, 0:3, 0:3] = 2
    ref[2, 0:3, 0:3] = 3
    np.testing.assert_array_equal(out, ref)
    vol = img((5, 6, 7))
    out = run(vol, layout="", anchor=(1, 2, 3), shape=(2, 2, 2))
    ref = vol.copy()
    ref[1:3, 2:4, 3:5] = 0
    np.testing.assert_array_equal(out, ref)


def test_no_region_is_identity_and_fill_saturates():
    x = img((5, 6, 3))
    np.testing.assert_array_equal(run(x), x)
    out = run(x, anchor=(0, 0), shape=(1, 1), fill_value=300.0)
    assert (out[0, 0] == 255).all()


def test_argument_inputs_in_a_pipeline():
    imgs = [img((20, 30, 3)) for _ in range(2)]
    anchors = [np.array([1, 2], np.float32), np.array([5, 6, 10, 20], np.float32)]
    shapes = [np.array([3, 4], np.float32), np.array([2, 2, 1, 5], np.float32)]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        x = fn.external_source(lambda: imgs, layout="HWC")
        a = fn.external_source(lambda: anchors)
        s = fn.external_source(lambda: shapes)
        pipe.set_outputs(
            fn.erase(x, anchor=a, shape=s, axis_names="HW", fill_value=9),
            ops.Erase(anchor=[0, 0], shape=[1, 1])(x),
        )
    out, legacy = pipe.run()
    r0 = imgs[0].copy()
    r0[1:4, 2:6] = 9
    r1 = imgs[1].copy()
    r1[5:7, 6:8] = 9
    r1[10:11, 20:25] = 9
    np.testing.assert_array_equal(out.at(0), r0)
    np.testing.assert_array_equal(out.at(1), r1)
    assert legacy.at(0)[0, 0].tolist() == [0, 0, 0]


def test_errors():
    x = img((10, 10, 3))
    with pytest.raises(ArgumentError, match="normalized cannot be combined"):
        Erase(normalized=True, normalized_anchor=False)
    with pytest.raises(ArgumentError, match="same length"):
        run(x, anchor=(1, 2), shape=(1, 2, 3, 4))
    with pytest.raises(ArgumentError, match="whole number of regions"):
        run(x, anchor=(1, 2, 3), shape=(1, 2, 3), axis_names="HW")
    with pytest.raises(ArgumentError, match="not all in the input layout"):
        run(x, anchor=(1,), shape=(1,), axis_names="D")
    with pytest.raises(ArgumentError, match="needs a 'C' axis"):
        run(img((5, 5)), layout="HW", anchor=(1, 1), shape=(1, 1), fill_value=(1, 2))
    with pytest.raises(ArgumentError, match="2 values but the input has 3 channels"):
        run(x, anchor=(1, 1), shape=(1, 1), fill_value=(1, 2))
    with pytest.raises(ArgumentError, match="not supported"):
        run(np.zeros((2, 2), np.float64), layout="HW", anchor=(0, 0), shape=(1, 1))


def test_gpu_tables_on_the_host():
    from dlpipe.kernels.erase import ERASE_DESC, erase_tables

    d, table, vals = erase_tables(
        [(4, 5, 3), (6, 7)], [[((0, 2), (1, 3), (0, 3))], []], [np.array([1, 2, 3]), [9]], 2
    )
    assert d.dtype == ERASE_DESC and d["n"].tolist() == [60, 42]
    assert d["region_count"].tolist() == [1, 0] and d["fill_off"].tolist() == [0, 3]
    assert table[0].tolist() == [0, 1, 0, 0, 0, 2, 3, 3, 0, 0]
    assert vals.tolist() == [1, 2, 3, 9] and d["shape"][1].tolist() == [6, 7, 0, 0, 0]


@pytest.mark.parametrize("seed", range(4))
def test_gpu_batch_tables_equal_per_sample_tables(seed):
    """The GPU launcher's batch path (regions of every sample as array arithmetic) builds the
    same descriptor, region and fill tables as the per-sample path, on random configurations;
    where it declines (differing counts, mismatched lengths) it returns None."""
    from dlpipe.kernels.erase import erase_tables, erase_tables_batch

    rng = np.random.default_rng(seed)
    used = 0
    for _ in range(300):
        ndim, n = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        shapes = rng.integers(0, 60, (n, ndim)).astype(np.int64)
        kw = dict(centered_anchor=bool(rng.integers(2)), fill_value=float(rng.normal() * 100))
        if rng.integers(2):
            kw["axes"] = [int(a) for a in rng.integers(-ndim, ndim, int(rng.integers(1, ndim + 1)))]
        naxes = len(kw["axes"]) if "axes" in kw else ndim
        if rng.integers(2):
            kw["normalized_anchor"], kw["normalized_shape"] = map(bool, rng.integers(0, 2, 2))
        k = int(rng.integers(0, 4)) * naxes
        args = {}
        if rng.integers(2):
            kw["anchor"], kw["shape"] = list(rng.uniform(-0.3, 40, k)), list(rng.uniform(-5, 40, k))
        else:
            extra = int(rng.integers(8) == 0)  # sometimes one sample has a value too many
            args["anchor"] = [rng.uniform(-0.3, 1.3, k + extra * (i == 0)) for i in range(n)]
            args["shape"] = [rng.uniform(-0.3, 1.3, k).astype(np.float32) for _ in range(n)]
        op = Erase(**kw)
        op.output_layouts([""])
        dtype = np.dtype(rng.choice([np.float32, np.uint8, np.int16]))
        boxes = op._batch_boxes(shapes, args)
        if boxes is None:
            continue
        used += 1
        per_sample = [op.sample_regions({a: v[i] for a, v in args.items()}, shapes[i].tolist())
                      for i in range(n)]  # fmt: skip
        fill = op.fill_values(dtype, shapes[0].tolist())
        ref = erase_tables(shapes.tolist(), per_sample, [fill] * n, None)
        got = erase_tables_batch(shapes, *boxes, fill, None)
        for want, have in zip(ref, got, strict=True):
            assert want.dtype == have.dtype and want.tobytes() == have.tobytes()
    assert used > 200
