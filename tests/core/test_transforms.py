"""fn.transforms.* (scale, rotation, shear, translation, crop, combine) against hand-written
float64 matrices: dimensions, centers, chaining onto an input transform in both orders,
argument inputs through a pipeline, and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops
from dlpipe.operators.transform_combine import TransformCombine
from dlpipe.operators.transform_crop import TransformCrop
from dlpipe.operators.transform_rotation import TransformRotation
from dlpipe.operators.transform_scale import TransformScale
from dlpipe.operators.transform_shear import TransformShear
from dlpipe.operators.transform_translation import TransformTranslation


def run(cls, inputs=(), args=None, **kwargs):
    op = cls(**kwargs)
    assert op.output_layouts([""] * len(inputs)) == [""]
    out = op.run_sample(tuple(inputs), args or {}, None)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    return out


def hom(m):
    m = np.asarray(m, np.float64)
    h = np.eye(m.shape[0] + 1)
    h[:-1] = m
    return h


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(a, np.asarray(b, np.float64)[: a.shape[0]], rtol=tol, atol=tol)


def test_scale():
    close(run(TransformScale, scale=[2, 3]), [[2, 0, 0], [0, 3, 0]])
    assert run(TransformScale, scale=[2, 3, 4]).shape == (3, 4)
    # center stays fixed: t = c * (1 - s)
    out = run(TransformScale, scale=[2, 0.5], center=[10, 20])
    close(out, [[2, 0, -10], [0, 0.5, 10]])
    p = np.array([10.0, 20.0, 1.0])
    close((hom(out) @ p)[:2], [10, 20])
    # a scalar scale: 1-D, or ndim, or the input transform's dimensions
    assert run(TransformScale, scale=2.0).shape == (1, 2)
    close(run(TransformScale, scale=2.0, ndim=3), np.c_[np.eye(3) * 2, np.zeros(3)])
    inp = np.array([[1, 0, 5], [0, 1, 7]], np.float32)
    close(run(TransformScale, (inp,), scale=3.0), [[3, 0, 15], [0, 3, 21]])


def test_translation():
    close(run(TransformTranslation, offset=[3, -4]), [[1, 0, 3], [0, 1, -4]])
    close(run(TransformTranslation, offset=[1, 2, 3]), np.c_[np.eye(3), [1, 2, 3]])


@pytest.mark.parametrize("angle", [0.0, 30.0, -75.5, 90.0, 180.0])
def test_rotation_2d(angle):
    a = math.radians(angle)
    c, s = math.cos(a), math.sin(a)
    close(run(TransformRotation, angle=angle), [[c, -s, 0], [s, c, 0]])
    out = run(TransformRotation, angle=angle, center=[5, 8])
    np.testing.assert_allclose(hom(out) @ [5, 8, 1], [5, 8, 1], atol=1e-5)
    np.testing.assert_allclose(out[:, :2], [[c, -s], [s, c]], atol=1e-6)


def test_rotation_3d_matches_rodrigues():
    axis = np.array([1.0, 2.0, -0.5])
    angle = 40.0
    k = axis / np.linalg.norm(axis)
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    a = math.radians(angle)
    r = np.eye(3) + math.sin(a) * kx + (1 - math.cos(a)) * kx @ kx
    out = run(TransformRotation, angle=angle, axis=list(axis))
    assert out.shape == (3, 4)
    close(out, np.c_[r, np.zeros(3)])
    # about z, 3-D rotation equals the 2-D one in x, y
    z = run(TransformRotation, angle=25.0, axis=[0, 0, 1])
    np.testing.assert_allclose(z[:2, :2], run(TransformRotation, angle=25.0)[:, :2], atol=1e-6)
    # reversing the axis is negating the angle
    np.testing.assert_allclose(
        run(TransformRotation, angle=-angle, axis=list(-axis)), out, atol=1e-6
    )
    c3 = run(TransformRotation, angle=angle, axis=list(axis), center=[1, 2, 3])
    np.testing.assert_allclose(hom(c3) @ [1, 2, 3, 1], [1, 2, 3, 1], atol=1e-5)


def test_shear():
    close(run(TransformShear, shear=[0.5, -0.25]), [[1, 0.5, 0], [-0.25, 1, 0]])
    t = math.tan(math.radians(30))
    close(run(TransformShear, angles=[30, 0]), [[1, t, 0], [0, 1, 0]])
    out = run(TransformShear, shear=[1, 2, 3, 4, 5, 6])
    close(out, [[1, 1, 2, 0], [3, 1, 4, 0], [5, 6, 1, 0]])
    out = run(TransformShear, shear=[[1, 2], [3, 4], [5, 6]])
    close(out, [[1, 1, 2, 0], [3, 1, 4, 0], [5, 6, 1, 0]])
    c = run(TransformShear, shear=[0.5, 0.1], center=[4, 6])
    np.testing.assert_allclose(hom(c) @ [4, 6, 1], [4, 6, 1], atol=1e-5)


def test_crop():
    out = run(TransformCrop, from_start=[10, 20], from_end=[30, 60], to_start=0, to_end=1)
    close(out, [[1 / 20, 0, -0.5], [0, 1 / 40, -0.5]])
    np.testing.assert_allclose(hom(out) @ [30, 60, 1], [1, 1, 1], atol=1e-6)
    # defaults: identity in 1-D
    close(run(TransformCrop), [[1, 0]])
    # absolute swaps reversed bounds
    out = run(TransformCrop, from_start=[30], from_end=[10], absolute=True)
    close(out, [[1 / 20, -0.5]])
    out = run(TransformCrop, from_start=[30], from_end=[10])
    close(out, [[-1 / 20, 1.5]])
    # single values broadcast to the input transform's dimensions
    inp = np.array([[2, 0, 0], [0, 2, 0]], np.float32)
    out = run(TransformCrop, (inp,), from_start=1.0, from_end=3.0)
    close(out, hom([[0.5, 0, -0.5], [0, 0.5, -0.5]]) @ hom(inp))


def test_chaining_order():
    inp = run(TransformRotation, angle=30.0)
    s = run(TransformScale, scale=[2, 3])
    after = run(TransformScale, (inp,), scale=[2, 3])
    close(after, hom(s) @ hom(inp))
    before = run(TransformScale, (inp,), scale=[2, 3], reverse_order=True)
    close(before, hom(inp) @ hom(s))


def test_combine():
    a = run(TransformTranslation, offset=[1, 2])
    b = run(TransformRotation, angle=90.0)
    c = run(TransformScale, scale=[2, 2])
    out = run(TransformCombine, (a, b, c))
    close(out, hom(c) @ hom(b) @ hom(a))  # T3(T2(T1(x)))
    rev = run(TransformCombine, (a, b, c), reverse_order=True)
    close(rev, hom(a) @ hom(b) @ hom(c))
    with pytest.raises(ArgumentError, match="same shape"):
        run(TransformCombine, (a, run(TransformScale, scale=[1, 1, 1])))


def test_argument_inputs_per_sample():
    args = {"angle": np.float32(90.0), "center": np.array([1.0, 1.0], np.float32)}
    out = run(TransformRotation, args=args, angle=0.0)
    close(out, [[0, -1, 2], [1, 0, 0]])
    out = run(TransformScale, args={"scale": np.array([4.0], np.float32)}, scale=1.0, ndim=2)
    close(out, [[4, 0, 0], [0, 4, 0]])


def test_pipeline_and_ops_spelling():
    angles = [np.float32(a) for a in (0.0, 90.0, 45.0)]
    pipe = Pipeline(batch_size=3, num_threads=2, device_id=None, seed=1)
    with pipe:
        ang = fn.external_source(lambda: angles)
        r = fn.transforms.rotation(angle=ang)
        t = fn.transforms.translation(r, offset=[10.0, 0.0])
        legacy = ops.transforms.Scale(scale=[2.0, 2.0])(t)
        pipe.set_outputs(r, t, legacy, fn.transforms.combine(r, legacy))
    r, t, legacy, comb = pipe.run()
    for i, a in enumerate((0.0, 90.0, 45.0)):
        rad = math.radians(a)
        rot = [[math.cos(rad), -math.sin(rad), 0], [math.sin(rad), math.cos(rad), 0]]
        close(r.at(i), rot)
        close(t.at(i), hom([[1, 0, 10], [0, 1, 0]]) @ hom(rot))
        close(legacy.at(i), np.diag([2, 2, 1.0]) @ hom(t.at(i)), tol=1e-4)
        close(comb.at(i), hom(legacy.at(i)) @ hom(rot), tol=1e-4)
        assert r.at(i).shape == (2, 3) and r.at(i).dtype == np.float32


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (TransformScale, dict(scale=[1, 2], ndim=0), "ndim=0"),
        (TransformScale, dict(scale=[1] * 7), "1..6 elements"),
        (TransformRotation, dict(angle=[1, 2]), "single number"),
        (TransformRotation, dict(angle=1, axis=[0, 0, 0]), "nonzero vector"),
        (TransformShear, dict(shear=[1, 2], angles=[1, 2]), "one and only one"),
        (TransformShear, dict(shear=[1, 2, 3]), "D\\*\\(D-1\\)"),
        (TransformShear, dict(angles=[95, 0]), "\\[-90, 90\\]"),
        (TransformCrop, dict(from_start=[0, 0], to_end=[1, 1, 1]), "same number of elements"),
    ],
)
def test_argument_errors(cls, kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        cls(**kwargs)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda a: fn.transforms.scale(), "scale is required"),
        (lambda a: fn.transforms.rotation(center=[1, 2]), "angle is required"),
        (lambda a: fn.transforms.translation(), "offset is required"),
        (lambda a: fn.transforms.shear(), "one and only one"),
        (lambda a: fn.transforms.shear(shear=[1, 2], angles=a), "one and only one"),
    ],
)
def test_build_time_errors(build, match):
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe, pytest.raises(ArgumentError, match=match):
        build(fn.external_source(lambda: [np.zeros(2, np.float32)]))


def test_argument_inputs_satisfy_required_arguments():
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        a = fn.external_source(lambda: [np.float32(30), np.float32(-30)])
        sh = fn.external_source(lambda: [np.array([10, 0], np.float32)] * 2)
        pipe.set_outputs(fn.transforms.rotation(angle=a), fn.transforms.shear(angles=sh))
    rot, shear = pipe.run()
    close(rot.at(1), run(TransformRotation, angle=-30.0))
    t = math.tan(math.radians(10))
    close(shear.at(0), [[1, t, 0], [0, 1, 0]])


def test_run_time_errors():
    with pytest.raises(ArgumentError, match="center=\\[1.0, 2.0, 3.0\\] must have 2"):
        run(TransformRotation, angle=1, center=[1, 2, 3])
    with pytest.raises(ArgumentError, match="center=\\[1.0, 2.0\\] must have 3"):
        run(TransformScale, scale=[1, 2, 3], center=[1, 2])
    with pytest.raises(ArgumentError, match="3D transform but the arguments describe a 2D"):
        run(TransformScale, (np.zeros((3, 4), np.float32),), scale=[1, 2])
    with pytest.raises(ArgumentError, match="must be FLOAT"):
        run(TransformScale, (np.zeros((2, 3), np.float64),), scale=[1, 2])
    with pytest.raises(ArgumentError, match="shape \\(2, 2\\)"):
        run(TransformScale, (np.zeros((2, 2), np.float32),), scale=[1, 2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_shear_and_translation_batches_equal_their_samples(dtype):
    """Per-sample shears and offsets (automatic augmentation's warps) run batch-wise: each row
    equals the per-sample matrix bit for bit; what the batch path does not take (a center,
    angles, offsets of mixed lengths) goes through the per-sample path, its errors too."""
    rng = np.random.default_rng(2)
    n = 9

    def rows(size):
        return [(rng.uniform(-3, 3, size) * 7).astype(dtype) for _ in range(n)]

    cases = [
        (TransformShear(), {"shear": rows(2)}),
        (TransformShear(center=[1.0, 2.0]), {"shear": rows(2)}),
        (TransformShear(), {"angles": [np.clip(r, -89, 89) for r in rows(2)]}),
        (TransformTranslation(), {"offset": rows(2)}),
        (TransformTranslation(), {"offset": rows(3)}),
        (TransformTranslation(), {"offset": rows(1)}),
    ]
    for op, args in cases:
        (got,) = op.run_batch_cpu((), args, None)
        want = [op.run_sample((), {k: v[i] for k, v in args.items()}, None) for i in range(n)]
        assert len(got) == n
        for g, w in zip(got, want, strict=True):
            g = np.asarray(g)
            assert g.dtype == w.dtype == np.float32 and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    mixed = {"offset": [np.float32([1, 2]), np.float32([1, 2, 3])]}
    (got,) = TransformTranslation().run_batch_cpu((), mixed, None)
    assert [np.asarray(g).shape for g in got] == [(2, 3), (3, 4)]
    with pytest.raises(ArgumentError, match="D\\*\\(D-1\\)") as e:
        TransformShear().run_batch_cpu((), {"shear": [np.float32([1, 2]), np.float32([1])]}, None)
    assert e.value.sample_index == 1


def test_shear_of_drawn_factors_runs_batch_wise_in_a_pipeline():
    pipe = Pipeline(batch_size=6, num_threads=1, device_id=None, seed=4)
    with pipe:
        f = fn.random.uniform(range=[-0.5, 0.5], shape=[2])
        pipe.set_outputs(fn.transforms.shear(shear=f), f)
    pipe.build()
    node = next(n for n in pipe._ops if n.op.schema == "transforms.shear")
    assert node.op.batch_level_in(node)
    mats, factors = pipe.run()
    for i in range(6):
        s = np.asarray(factors.at(i))
        np.testing.assert_array_equal(mats.at(i), np.float32([[1, s[0], 0], [s[1], 1, 0]]))
