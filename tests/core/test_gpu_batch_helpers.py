"""Host helpers of the GPU launchers (no GPU needed)."""

from __future__ import annotations

import numpy as np

from dlpipe.kernels._batch import uniform_rows


def test_uniform_rows_is_rows_all_equal():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, d = rng.integers(1, 6), rng.integers(0, 4)
        a = rng.integers(0, 2, (n, d)).astype(np.int64)
        assert uniform_rows(a) == bool((a == a[0]).all())
        b = np.tile(a[:1], (n, 1))
        assert uniform_rows(b)
        assert uniform_rows(b[:, ::-1])  # a strided view
    assert not uniform_rows(np.array([[224, 224, 3], [224, 3, 224]], np.int64))


def test_reduction_plan_of_a_batch_of_one_shape_equals_the_per_sample_plan():
    from dlpipe.operators.reductions import Max, Mean, Sum

    class Samples:
        def __init__(self, shapes):
            self.shapes = np.asarray(shapes, np.int64)

        def __len__(self):
            return len(self.shapes)

    for op in (Mean(axes=[0, 1]), Max(axes=[0, 1], keep_dims=True), Sum()):
        one = Samples([[7, 5, 3]] * 4)
        mixed = Samples([[7, 5, 3], [7, 5, 3], [7, 5, 3], [2, 5, 3]])
        axes, shapes, norms = op._gpu_plan(one)
        axes2, shapes2, norms2 = op._gpu_plan(mixed)  # per sample (the last differs)
        assert axes == axes2
        np.testing.assert_array_equal(shapes, np.repeat(shapes2[:1], 4, axis=0))
        np.testing.assert_array_equal(norms, np.repeat(norms2[:1], 4))
        assert shapes.shape[0] == 4 and norms.shape == (4,)


def test_c_contiguous_is_strides_equal_c_strides():
    from dlpipe.kernels._batch import c_contiguous, c_strides

    class Samples:
        def __init__(self, shapes, strides):
            self.shapes = np.asarray(shapes, np.int64)
            self.strides = np.asarray(strides, np.int64)

        def __len__(self):
            return len(self.shapes)

    rng = np.random.default_rng(1)
    for _ in range(100):
        n, d = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        shapes = np.tile(rng.integers(1, 5, (1, d)), (n, 1)) if rng.random() < 0.5 else (
            rng.integers(1, 5, (n, d)))  # fmt: skip
        strides = c_strides(shapes)
        if rng.random() < 0.5:
            strides = strides + (rng.random(strides.shape) < 0.3)
        s = Samples(shapes, strides)
        assert c_contiguous(s) == bool((strides == c_strides(shapes)).all())
    assert c_contiguous(Samples(np.zeros((0, 3)), np.zeros((0, 3))))


def test_small_stack_equals_np_stack():
    from dlpipe.operators._small import stack

    rng = np.random.default_rng(2)
    for dt in (np.uint8, np.int32, np.float32, np.float64, np.bool_, np.complex64, ">i4", "U3"):
        for shape in ((), (1,), (2, 3)):
            xs = [rng.integers(0, 9, shape).astype(dt) for _ in range(5)]
            got, want = stack(xs), np.stack(xs)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    assert stack([np.zeros(2), np.zeros(3)]) is None
    assert stack([np.zeros(2, np.float32), np.zeros(2)]) is None


def test_host_numbers_reads_one_number_per_sample_of_one_numeric_dtype():
    from dlpipe.kernels._batch import host_numbers
    from dlpipe.operators._small import stack

    rng = np.random.default_rng(0)
    for dt in (np.bool_, np.int32, np.int64, np.uint8, np.float32, np.float64):
        samples = [np.asarray(v).astype(dt) for v in rng.integers(0, 3, 50)]
        got = host_numbers(samples)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, stack(samples).astype(np.float64))
    ones = host_numbers([np.array([1.5]), np.array([0.0])])  # one element each, not 0-d
    assert ones is None or ones.tolist() == [1.5, 0.0]  # (numpy may refuse them: stacked)
    for other in (
        [np.array("1")],  # not numbers: the caller stacks them (and refuses them)
        [np.array(1 + 0j)],
        [np.array(1, np.int32), np.array(1, np.int64)],  # two dtypes
        [1, 0],  # Python numbers
        [np.array([1, 0])],  # several numbers
        [],
    ):
        assert host_numbers(other) is None
