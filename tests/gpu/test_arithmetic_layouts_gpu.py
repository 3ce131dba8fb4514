"""GPU expressions over batches of one layout (every sample the same shape and strides: the
memoised launch layout of ``kernels/arithmetic.py``) and over ragged ones (per-sample
broadcasting vectorised), against the same expressions on the CPU: per-channel constants,
per-sample scalars, 0-d samples, empty samples, sub-batches of a branch, layouts that change
from one batch to the next."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

import dlpipe  # noqa: E402
from dlpipe import Pipeline, fn, math, pipeline_def, types  # noqa: E402

RNG = np.random.default_rng(23)


def both(build, batches: list[list], iterations: int = 1):
    """build(*nodes) on CPU nodes and on their GPU copies, one batch of each input per
    iteration; per iteration, per output, (gpu samples, cpu samples)."""
    n = len(batches[0][0])
    feeds = [iter(b) for b in batches]
    pipe = Pipeline(batch_size=n, num_threads=2, device_id=0, seed=4, prefetch_queue_depth=1)
    with pipe:
        srcs = [fn.external_source(source=(lambda f=f: next(f)), batch=True) for f in feeds]
        cpu = build(*srcs)
        gpu = build(*[s.gpu() for s in srcs])
        cpu = cpu if isinstance(cpu, tuple) else (cpu,)
        gpu = gpu if isinstance(gpu, tuple) else (gpu,)
        pipe.set_outputs(*gpu, *cpu)
    res = []
    for _ in range(iterations):
        outs = pipe.run()
        k = len(outs) // 2
        it = []
        for g, c in zip(outs[:k], outs[k:], strict=True):
            assert isinstance(g, dlpipe.TensorListGPU)
            g = g.as_cpu()
            it.append(([np.asarray(g.at(i)) for i in range(n)],
                       [np.asarray(c.at(i)) for i in range(n)]))  # fmt: skip
        res.append(it)
    return res


def assert_same(gpu, cpu):
    for g, c in zip(gpu, cpu, strict=True):
        assert g.dtype == c.dtype and g.shape == c.shape
        if c.dtype.kind == "f":
            np.testing.assert_allclose(g, c, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, c)


def images(n, shape):
    return [RNG.integers(0, 255, shape).astype(np.uint8) for _ in range(n)]


def expressions(x, s):
    mean = types.Constant(np.float32([10, 20, 30]))
    return (
        (x - mean) * s,  # per-channel constant and per-sample scalar
        math.clamp(x * 2 - 100, 0, 255),
        x & 0xF0,
        s * 3 + s,  # 0-d samples only
        (x > 100) ^ True,
    )


@pytest.mark.parametrize("shape", [(7, 5, 3), (1, 4, 3), (6, 1, 3), (0, 4, 3)])
def test_one_layout_batches(shape):
    """Every sample one shape (dense batches), three iterations of fresh data."""
    n = 6
    xs = [images(n, shape) for _ in range(3)]
    ss = [[np.array(v, np.float32) for v in RNG.uniform(-2, 2, n)] for _ in range(3)]
    for it in both(expressions, [xs, ss], iterations=3):
        for gpu, cpu in it:
            assert_same(gpu, cpu)


def test_layout_changes_between_batches_and_ragged_batches():
    """One layout, then another, then a ragged batch, then the first again (the memoised
    layouts are per layout, the ragged batch takes the general path)."""
    n = 4
    xs = [images(n, (5, 4, 3)), images(n, (3, 8, 3)),
          [RNG.integers(0, 255, (2 + i, 3 + i, 3)).astype(np.uint8) for i in range(n)],
          images(n, (5, 4, 3))]  # fmt: skip
    ss = [[np.array(v, np.float32) for v in RNG.uniform(-2, 2, n)] for _ in range(4)]
    for it in both(expressions, [xs, ss], iterations=4):
        for gpu, cpu in it:
            assert_same(gpu, cpu)


def test_expressions_on_branch_sub_batches():
    """Expressions inside branches run on sub-batches (taken from the batch: one layout, not
    dense); the merged result against the CPU."""
    n = 12
    xs = images(n, (6, 5, 3))
    preds = [np.array(v) for v in RNG.random(n) < 0.5]
    ks = [np.array(i % 3, np.int32) for i in range(n)]

    def graph(device):
        def g():
            x = fn.external_source(source=lambda: xs, batch=True, layout="HWC")
            p = fn.external_source(source=lambda: preds, batch=True)
            k = fn.external_source(source=lambda: ks, batch=True)
            y = x.gpu() if device == "gpu" else x
            mean = types.Constant(np.float32([1, 2, 3]))
            if p:
                y = fn.cast((y - mean) * k, dtype=types.FLOAT)
                if k == 1:
                    y = y / 2 + mean
            else:
                y = fn.cast(y, dtype=types.FLOAT) * 0.5
            return (y,)

        return g

    outs = {}
    for device in ("gpu", "cpu"):
        pipe = pipeline_def(graph(device), enable_conditionals=True, batch_size=n,
                            num_threads=2, device_id=0, seed=1)()  # fmt: skip
        (y,) = pipe.run()
        y = y.as_cpu() if hasattr(y, "as_cpu") else y
        outs[device] = [np.asarray(y.at(i)) for i in range(n)]
    assert_same(outs["gpu"], outs["cpu"])
