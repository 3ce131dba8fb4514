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


def ssd_anchors(grid=8, sizes=(0.1, 0.25, 0.5)):
    out = []
    for s in sizes:
        for i in range(grid):
            for j in range(grid):
                cx, cy = (j + 0.5) / grid, (i + 0.5) / grid
                out.append(np.clip([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2], 0, 1))
    return np.asarray(out, F).reshape(-1)


@pytest.mark.parametrize("offset", [False, True])
def test_box_encoder(offset):
    rng = np.random.default_rng(1)
    boxes = [random_boxes(rng, k) for k in (3, 0, 40, 1, 7)]
    boxes[2][5] = boxes[2][9]  # a tie
    labels = [rng.integers(1, 90, len(b)).astype(np.int32) for b in boxes]
    kw = dict(anchors=ssd_anchors(), criteria=0.5, offset=offset)
    if offset:
        kw.update(scale=300.0, means=[0.0, 0.1, 0.0, 0.2], stds=[0.1, 0.1, 0.2, 0.2])
    for data in (boxes, [b.reshape(-1) for b in boxes]):
        pipe = Pipeline(batch_size=len(boxes), num_threads=2, device_id=0, seed=5)
        with pipe:
            b = fn.external_source(source=[data])
            lab = fn.external_source(source=[labels])
            g = fn.box_encoder(b.gpu(), lab.gpu(), **kw)
            c = fn.box_encoder(b, lab, **kw)
            pipe.set_outputs(*g, *c)
        gb, gl, cb, cl = pipe.run()
        pipe.close()
        assert gb.shape() == cb.shape() and gl.shape() == cl.shape()
        assert gb.dtype == cb.dtype and gl.dtype == cl.dtype
        gb, gl = gb.as_cpu(), gl.as_cpu()
        for i in range(len(boxes)):
            np.testing.assert_array_equal(gl.at(i), cl.at(i))
            if offset:  # logf on the device and numpy's log on the host may differ in an ulp
                np.testing.assert_allclose(gb.at(i), cb.at(i), rtol=1e-5, atol=1e-5)
            else:
                np.testing.assert_array_equal(gb.at(i), cb.at(i))


def test_paste():
    rng = np.random.default_rng(2)
    imgs = [
        rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((30, 41), (7, 3), (64, 64))
    ]
    ratio = [F(r) for r in (1.0, 3.7, 2.0)]
    px = [F(p) for p in (0.5, 0.0, 1.0)]
    pairs = run_both(
        dict(x=imgs, r=ratio, p=px),
        lambda g, c: (
            fn.paste(g["x"], ratio=c["r"], paste_x=c["p"], paste_y=0.3, fill_value=(1, 2, 3)),
            fn.paste(c["x"], ratio=c["r"], paste_x=c["p"], paste_y=0.3, fill_value=(1, 2, 3)),
        ),
        3,
    )
    for got, want in pairs:
        np.testing.assert_array_equal(got, want)
