"""The GPU box operators against their CPU side, inside pipelines, on random boxes."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")

from dlpipe import Pipeline, fn  # noqa: E402

F = np.float32


def random_boxes(rng, n, ltrb=True):
    lo = rng.uniform(0, 0.6, (n, 2)).astype(F)
    size = rng.uniform(0.01, 0.4, (n, 2)).astype(F)
    return np.concatenate([lo, lo + size if ltrb else size], axis=1).astype(F)


def run_both(batches, build, batch_size):
    """``build(gpu_nodes, cpu_nodes)`` -> (gpu output, cpu output); the external sources are
    ``batches`` (name -> list of samples), fed to both sides. Returns per-sample pairs."""
    pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=0, seed=5)
    with pipe:
        cpu = {k: fn.external_source(source=[v], name=k) for k, v in batches.items()}
        gpu = {k: v.gpu() for k, v in cpu.items()}
        g, c = build(gpu, cpu)
        pipe.set_outputs(g, c)
    g, c = pipe.run()
    pipe.close()
    assert g.dtype == c.dtype and g.shape() == c.shape()
    g = g.as_cpu()
    return [(np.array(g.at(i)), np.array(c.at(i))) for i in range(len(c))]


@pytest.mark.parametrize("ltrb", [False, True])
def test_bb_flip(ltrb):
    rng = np.random.default_rng(0)
    boxes = [random_boxes(rng, k, ltrb) for k in (5, 0, 300, 1)]
    flat = [b.reshape(-1) for b in boxes]
    h = [np.int32(f) for f in (1, 1, 0, 1)]
    v = [np.int32(f) for f in (0, 1, 1, 1)]
    for data in (boxes, flat):
        pairs = run_both(
            dict(b=data, h=h, v=v),
            lambda g, c: (
                fn.bb_flip(g["b"], ltrb=ltrb, horizontal=c["h"], vertical=c["v"]),
                fn.bb_flip(c["b"], ltrb=ltrb, horizontal=c["h"], vertical=c["v"]),
            ),
            4,
        )
        for got, want in pairs:
            np.testing.assert_array_equal(got, want)
