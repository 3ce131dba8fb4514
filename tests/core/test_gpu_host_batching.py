"""The host side of GPU operators' batching, run against the stand-in CuPy of ``ci/fake_cupy``
(arrays are metadata, kernels and copies only counted): the external source's batched device
copy and the descriptors it uploads. Skipped where a real CuPy is installed (the stand-in would
shadow it); tests/gpu checks the same paths on a GPU."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

FAKE = Path(__file__).resolve().parents[2] / "ci" / "fake_cupy"
_SHADOWED = ("cupy", "cupyx", "dlpipe.tensors_gpu")


def _shadowed(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in _SHADOWED)


def _clear_kernel_caches() -> None:
    """Forget compiled kernels (memoised per process): each test's stand-in module counts its
    own launches."""
    for name, mod in list(sys.modules.items()):
        if name == "dlpipe.kernels" or name.startswith("dlpipe.kernels."):
            for attr in list(vars(mod).values()):
                if callable(getattr(attr, "cache_clear", None)):
                    attr.cache_clear()


def _record_empty(monkeypatch, cupy) -> list:
    """Every array the stand-in's ``cupy.empty`` makes from now on, in order."""
    made = []
    empty = cupy.empty

    def recording_empty(shape, dtype=np.float32, order="C"):
        a = empty(shape, dtype, order)
        made.append(a)
        return a

    monkeypatch.setattr(cupy, "empty", recording_empty)
    return made


@pytest.fixture
def fake_cupy(monkeypatch):
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("a real CuPy is installed")
    saved = {k: v for k, v in sys.modules.items() if _shadowed(k)}
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(FAKE))
    import cupy

    cupy.COUNTS.clear()
    _clear_kernel_caches()
    yield cupy
    _clear_kernel_caches()
    for k in [k for k in sys.modules if _shadowed(k)]:
        del sys.modules[k]
    sys.modules.update(saved)


def _capture_uploads(monkeypatch, module):
    """The host arrays ``module.upload`` sends, in order."""
    sent = []
    real = module.upload

    def upload(host, stream):
        sent.append(np.array(host))
        return real(host, stream)

    monkeypatch.setattr(module, "upload", upload)
    return sent


@pytest.mark.parametrize("ragged", [False, True])
def test_device_source_batch_is_one_copy_launch(fake_cupy, monkeypatch, ragged):
    import dlpipe.kernels.copy as kcopy
    from dlpipe.kernels.copy import CHUNK
    from dlpipe.operators._copy import _copy_on_device

    cupy = fake_cupy
    sent = _capture_uploads(monkeypatch, kcopy)
    shapes = [(5 + 3 * i * ragged, 7, 3) for i in range(4)]
    samples = [cupy.ndarray(s, np.float32) for s in shapes]
    strided = cupy.ndarray((5 + 3 * ragged, 7, 3), np.float32, strides=(168 * 2, 24, 4))
    samples[1] = strided
    out = _copy_on_device(samples, cupy.cuda.Stream())
    assert [tuple(v) for v in out.shapes] == [tuple(a.shape) for a in samples]
    assert (out.dense is not None) == (not ragged)
    assert cupy.COUNTS["launch:copy_rows"] == 1
    assert cupy.COUNTS["copy_kernel"] == 1  # the strided sample made contiguous first
    (descs,) = sent
    assert descs["dst"].tolist() == out.ptrs.astype(np.int64).tolist()
    nbytes = [int(np.prod(a.shape)) * 4 for a in samples]
    assert descs["total"].tolist() == nbytes
    assert descs["row_bytes"].tolist() == [CHUNK] * 4  # contiguous: cut in CHUNK rows
    # the contiguous samples are read where they are; the strided one from its copy
    assert [descs["src"][i] == samples[i].data.ptr for i in range(4)] == [1, 0, 1, 1]
    # samples of a ragged batch do not overlap
    ends = out.ptrs.astype(np.int64) + np.array(nbytes)
    assert (ends[:-1] <= out.ptrs.astype(np.int64)[1:]).all()


def test_device_source_rejects_mixed_batches(fake_cupy):
    from dlpipe.operators._copy import _copy_on_device

    cupy = fake_cupy
    with pytest.raises(TypeError, match="mixed dtypes"):
        _copy_on_device([cupy.ndarray((2,), np.uint8), cupy.ndarray((2,), np.float32)], None)
    with pytest.raises(ValueError, match="one number of dimensions"):
        _copy_on_device([cupy.ndarray((2,), np.uint8), cupy.ndarray((2, 2), np.uint8)], None)


def test_normalize_scalar_parameters_of_a_ragged_batch_go_up_once(fake_cupy, monkeypatch):
    import dlpipe.kernels as kernels
    from dlpipe.kernels.normalize import NORM_DESC
    from dlpipe.operators._normalize_gpu import normalize_gpu
    from dlpipe.operators.normalize import Normalize
    from dlpipe.tensors_gpu import SampleList

    cupy = fake_cupy
    sent = _capture_uploads(monkeypatch, kernels)
    monkeypatch.setattr("dlpipe.kernels.normalize.upload", kernels.upload)
    shapes = [(4 + i, 5, 3) for i in range(5)]
    batch = SampleList.from_arrays([cupy.ndarray(sh, np.float32) for sh in shapes])
    op = Normalize(mean=118.0, stddev=57.0, scale=2.0)
    op.output_layouts(["HWC"])
    out = normalize_gpu(op, batch, {}, cupy.cuda.Stream())
    assert [tuple(v) for v in out.shapes] == shapes
    params, descs = sent  # the mean and the deviation in one copy, then the descriptors
    np.testing.assert_array_equal(params, [118.0, 57.0])
    d = descs.view(NORM_DESC)
    assert set(d["mean_ptr"].tolist()) == {d["dev_ptr"][0] - 4}
    assert len(set(d["dev_ptr"].tolist())) == 1
    assert (d["mean_strides"] == 0).all() and (d["dev_strides"] == 0).all()
    assert d["count"].tolist() == [int(np.prod(sh)) for sh in shapes]
    assert d["shape"][:, :3].tolist() == [list(sh) for sh in shapes]


def test_ragged_output_layout_is_memoised_and_aligned(fake_cupy):
    from dlpipe.kernels import _batch

    shapes = np.array([[3, 5, 3], [7, 2, 3], [1, 1, 1]], np.int64)
    first = _batch.alloc_batch(shapes, np.float32, 0)
    second = _batch.alloc_batch(shapes.copy(), np.float32, 0)
    offsets = (first.ptrs - first.ptrs[0]).tolist()
    assert offsets == (second.ptrs - second.ptrs[0]).tolist() == [0, 256, 512]
    assert first.owners is not second.owners  # fresh device memory each time
    assert first.strides.tolist() == [[15, 3, 1], [6, 3, 1], [1, 1, 1]]
    first.strides[0, 0] = 99  # a batch's own arrays: the memo is unaffected
    assert _batch.alloc_batch(shapes, np.float32, 0).strides[0, 0] == 15
    big = _batch.alloc_batch(np.array([[20, 20, 3], [1, 1, 1]]), np.float32, 0)
    assert (big.ptrs - big.ptrs[0]).tolist() == [0, 4864]  # 4800 bytes, to 256-byte steps


def test_blur_uploads_descriptors_and_taps_once(fake_cupy, monkeypatch):
    import dlpipe.kernels.gaussian_blur as kblur
    from dlpipe.operators._blur_plan import batch_plan
    from dlpipe.operators.gaussian_blur import GaussianBlur
    from dlpipe.tensors_gpu import SampleList

    cupy = fake_cupy
    sent = _capture_uploads(monkeypatch, kblur)
    batch = SampleList.from_arrays([cupy.ndarray((9 + i, 7, 3), np.uint8) for i in range(4)])
    op = GaussianBlur(sigma=1.5)
    op.output_layouts(["HWC"])
    plan, sets = batch_plan(op, {}, 4, 2)
    out = kblur.blur_batch(batch, 0, 2, True, plan, sets, np.uint8, stream=cupy.cuda.Stream())
    assert out.shapes.tolist() == batch.shapes.tolist()
    (host,) = sent
    head = 2 * 4 * kblur.BLUR_DESC.itemsize  # two passes of four samples
    descs = host[:head].view(kblur.BLUR_DESC)
    np.testing.assert_array_equal(host[head:].view(np.float32), plan.flat)
    assert descs["win_size"].tolist() == [11] * 8 and cupy.COUNTS["launch"] == 2


@pytest.mark.parametrize(
    "value",
    [
        np.float32([0.299, 0.587, 0.114]),
        np.arange(6, dtype=np.int16).reshape(2, 3),
        np.array([True, False, True]),
        np.float16([1.5, 2.5, 3.5]),
    ],
    ids=lambda v: v.dtype.name,
)
def test_cpu_constant_operand_of_a_gpu_expression_is_made_on_the_gpu(fake_cupy, value, monkeypatch):
    """``gpu_node * types.Constant(array)``: the constant is made on the GPU (its value, type
    and layout), uploaded once, instead of a CPU constant copied every iteration; as many nodes
    as with the copy (the random seeds stay)."""
    from dlpipe import Pipeline, fn, types

    def build():
        pipe = Pipeline(batch_size=2, num_threads=1, device_id=0, seed=3)
        with pipe:
            x = fn.external_source(source=lambda: [np.zeros(value.shape, np.float32)] * 2)
            pipe.set_outputs(x.gpu() * types.Constant(value, layout="AB"[: value.ndim]))
        pipe.build()
        return pipe

    pipe = build()
    ops = [n.op for n in pipe._ops]
    gpu = [op for op in ops if op.schema == "constant" and op.device == "gpu"]
    copies = [n for n in pipe._ops if n.op.schema == "_copy_to_gpu"]
    assert len(gpu) == 1 and len(copies) == 1  # the copy is the external source's
    assert copies[0].inputs[0].source.op.schema == "external_source"
    assert gpu[0].value.dtype == value.dtype and gpu[0].layout == "AB"[: value.ndim]
    np.testing.assert_array_equal(gpu[0].value, value)
    for _ in range(3):
        pipe.run()
    assert gpu[0]._gpu_value is not None
    first = gpu[0]._gpu_value
    pipe.run()
    assert gpu[0]._gpu_value is first  # uploaded once
    from dlpipe.operators import arithmetic

    monkeypatch.setattr(arithmetic, "_on_gpu", lambda x: x.gpu())
    assert len(build()._ops) == len(pipe._ops)


def test_dense_batch_marks_its_c_order_as_c_contiguous_finds_it(fake_cupy):
    """``SampleList.from_dense`` marks a batch whose samples have C strides (``_c_order``)
    exactly where ``c_contiguous`` (which then trusts the mark) finds them so: a dimension of
    1 may have any stride in a C-contiguous array."""
    from dlpipe.kernels._batch import c_contiguous, c_strides
    from dlpipe.tensors_gpu import SampleList

    cupy = fake_cupy
    for shape, strides in [
        ((4, 5, 7, 3), None),
        ((4, 1, 7, 3), (84, 0, 12, 4)),  # a dimension of 1 with stride 0
        ((4, 5, 1, 3), (60, 12, 4, 4)),
        ((3,), None),
        ((0, 2), None),
    ]:
        arr = cupy.ndarray(shape, np.float32, strides=strides)
        s = SampleList.from_dense(arr)
        want = bool((s.strides == c_strides(s.shapes)).all())
        assert getattr(s, "_c_order", False) == want, shape
        assert c_contiguous(s) == want
        plain = SampleList.of_arrays(s.dtype, s.ptrs, s.shapes, s.strides, None, 0)
        assert c_contiguous(plain) == want
        # found once, then marked (an empty batch is C-contiguous without looking)
        assert getattr(plain, "_c_order", False) == (want and len(plain) > 0)


def test_uniform_row_known_from_the_start_is_the_one_worked_out(fake_cupy):
    """A dense batch's ``_row`` (``kernels._batch.uniform_row``), and the one ``take`` and the
    branches' merge pass on, equal what ``uniform_row`` works out from the batch's arrays."""
    from dlpipe._gpu_branches import merge_gpu
    from dlpipe.kernels._batch import uniform_row
    from dlpipe.tensors_gpu import SampleList

    cupy = fake_cupy

    def fresh(s):
        return uniform_row(SampleList.of_arrays(s.dtype, s.ptrs, s.shapes, s.strides, None, 0))

    a = SampleList.from_dense(cupy.ndarray((6, 5, 7, 3), np.uint8))
    b = SampleList.from_dense(cupy.ndarray((4, 5, 7, 3), np.uint8))
    c = SampleList.from_dense(cupy.ndarray((4, 5, 8, 3), np.uint8))
    empty = SampleList.from_dense(cupy.ndarray((0, 5, 7, 3), np.uint8))
    pred = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1, 1], bool)
    taken = a.take([0, 2, 5, 1, 3, 4])
    for s in (
        a,
        b,
        c,
        empty,
        taken,
        a.take([]),
        merge_gpu(taken, b, pred),
        merge_gpu(taken, c, pred),
    ):
        assert uniform_row(s) == fresh(s)
    assert uniform_row(a) == ((5, 7, 3), (21, 3, 1))
    assert uniform_row(merge_gpu(taken, c, pred)) is None
    assert uniform_row(empty) is None


def test_spectrogram_runs_large_batches_in_chunks_of_one_plan(fake_cupy, monkeypatch):
    """A batch of more than ``fft_chunk(512)`` windows: one R2C plan of ``fft_chunk(512)`` rows, made
    once, executed over the padded frames chunk by chunk, the output as many rows; a small
    batch: one plan of its rounded size. Later batches of other lengths make no new plan."""
    from dlpipe.kernels import audio as kaudio
    from dlpipe.tensors_gpu import SampleList

    made, runs = [], []

    class Plan:
        def __init__(self, nx, fft_type, batch):
            made.append((nx, batch))

        def fft(self, a, out, direction):
            runs.append((a.shape, out.shape))

    monkeypatch.setattr(fake_cupy.cuda.cufft, "Plan1d", Plan)
    monkeypatch.setattr(kaudio, "_PLANS", {})
    window = np.hanning(320).astype(np.float32)
    for lengths in ([800_000, 500_000], [700_000, 650_000, 3_000], [2_000, 3_000]):
        samples = SampleList.from_arrays([fake_cupy.ndarray((n,), np.float32) for n in lengths])
        nwins = [1 + n // 160 for n in lengths]
        kaudio.spectrogram_batch(samples, nwins, window, 512, 160, 160, "reflect", 2, False)
    chunk = kaudio.fft_chunk(512)
    big = [kaudio.fft_rows(sum(1 + n // 160 for n in x), 512) for x in ([800_000, 500_000],
                                                                    [700_000, 650_000, 3_000])]  # fmt: skip
    assert made == [(512, chunk), (512, kaudio.fft_rows(2 + 2_000 // 160 + 3_000 // 160, 512))]
    assert runs[: sum(big) // chunk] == [((chunk, 512), (chunk, 257))] * (sum(big) // chunk)
    assert len(runs) == sum(big) // chunk + 1


def test_normalize_statistics_share_one_allocation_without_overlap(fake_cupy, monkeypatch):
    import dlpipe.kernels.normalize as knorm
    from dlpipe.kernels.normalize import NORM_DESC
    from dlpipe.kernels.reduce import REDUCE_DESC
    from dlpipe.operators._normalize_gpu import normalize_gpu
    from dlpipe.operators.normalize import Normalize
    from dlpipe.tensors_gpu import SampleList

    cupy = fake_cupy
    sent = _capture_uploads(monkeypatch, knorm)
    made = _record_empty(monkeypatch, cupy)
    shapes = [(64, 90 + 7 * i) for i in range(5)]  # the speech features: (mel, time), ragged
    batch = SampleList.from_arrays([cupy.ndarray(sh, np.float32) for sh in shapes])
    op = Normalize(axes=[1], ddof=1)
    op.output_layouts([""])
    out = normalize_gpu(op, batch, {}, cupy.cuda.Stream())
    assert [tuple(v) for v in out.shapes] == shapes
    (host,) = sent  # the two reductions' and the apply's descriptors in one copy
    n = len(shapes)
    d_mean = host[: n * REDUCE_DESC.itemsize].view(REDUCE_DESC)
    d_var = host[n * REDUCE_DESC.itemsize : 2 * n * REDUCE_DESC.itemsize].view(REDUCE_DESC)
    d = host[2 * n * REDUCE_DESC.itemsize :].view(NORM_DESC)
    stats, output = made[0], made[1]  # the statistics' buffer, then the output's
    assert len(made) == 3  # and the descriptors' upload
    means = d_mean["out_ptr"].astype(np.int64)
    sums = d_var["out_ptr"].astype(np.int64)
    assert (d_var["mean_ptr"] == means).all() and (d["mean_ptr"] == means).all()
    assert (d["dev_ptr"] == sums).all() and (d["out_ptr"] == out.ptrs.view(np.int64)).all()
    regions = sorted(
        [(int(p), int(p) + 64 * 4) for p in means] + [(int(p), int(p) + 64 * 8) for p in sums]
    )
    lo, hi = stats.data.ptr, stats.data.ptr + stats.nbytes
    assert all(lo <= a and b <= hi and a % 256 == 0 for a, b in regions)
    assert all(b <= a2 for (_, b), (a2, _) in zip(regions, regions[1:], strict=False))
    assert not lo <= output.data.ptr < hi
    assert d_mean["norm"].tolist() == [1.0 / sh[1] for sh in shapes]
    assert d_var["norm"].tolist() == [1.0] * n


@pytest.mark.parametrize(
    "window, on_host",
    [
        ((1, 1, {}), True),  # NeMo's lengths: the time extent of every (mel, time) sample
        ((0, 2, {}), True),
        ((1, 2, {"out_of_bounds_policy": "pad"}), False),  # past the end: the kernel pads
        ((0, 1, {"dtype": "FLOAT"}), False),  # a conversion: the kernel's
    ],
)
def test_slice_of_shapes_is_cut_on_the_host(fake_cupy, monkeypatch, window, on_host):
    """``fn.slice(fn.shapes(x), ...)`` on the GPU: the shapes' host copy is cut and uploaded,
    without a copy kernel, when every window is inside the samples and of their type; other
    windows launch the kernel as before."""
    import dlpipe.kernels as kernels
    import dlpipe.kernels.layout as klayout
    from dlpipe import fn, pipeline_def, types

    cupy = fake_cupy
    sent = _capture_uploads(monkeypatch, kernels)
    monkeypatch.setattr(klayout, "upload", kernels.upload)
    shapes = [(64, 90 + 7 * i) for i in range(5)]
    clips = [cupy.ndarray(sh, np.float32) for sh in shapes]
    anchor, extent, kw = window
    if "dtype" in kw:
        kw = {**kw, "dtype": getattr(types, kw["dtype"])}

    @pipeline_def(batch_size=5, num_threads=1, device_id=0, exec_async=False,
                  exec_pipelined=False, prefetch_queue_depth=1)  # fmt: skip
    def pipe_def():
        x = fn.external_source(source=lambda: clips, device="gpu", batch=True)
        return fn.slice(fn.shapes(x), anchor, extent, axes=(0,), **kw)

    pipe = pipe_def()
    pipe.build()
    cupy.COUNTS.clear()
    sent.clear()
    (out,) = pipe.run()
    samples = out._samples
    copies = sum(v for k, v in cupy.COUNTS.items() if k.startswith("launch:nd_copy"))
    if on_host:
        assert cupy.COUNTS["launch"] == 1 and not copies  # the external source's copy only
        want = np.array(shapes, np.int64)[:, anchor : anchor + extent]
        assert samples.shape_list() == [want.shape[1:]] * 5
        np.testing.assert_array_equal(sent[-1], want)  # what went up
        np.testing.assert_array_equal(samples._host, want)
        assert samples.dense is not None and samples.dense.data.ptr == int(samples.ptrs[0])
    else:
        assert cupy.COUNTS["launch"] == 2 and copies == 1  # and the copy kernel
        assert getattr(samples, "_host", None) is None


def test_launchers_enter_a_stream_unless_it_is_current(fake_cupy):
    """``stream_scoped`` launchers skip ``with stream:`` for the stream ``kernels.current``
    (the GPU stage) or an outer launcher made current, and enter any other one, the current
    stream being the given one inside the launcher either way."""
    from dlpipe import kernels

    cupy = fake_cupy
    entered = []

    class Counted(cupy.cuda.Stream):
        def __enter__(self):
            entered.append(self)
            return super().__enter__()

    a, b = Counted(), Counted()
    seen = []

    @kernels.stream_scoped
    def inner(stream=None):
        seen.append(cupy.cuda.get_current_stream())

    @kernels.stream_scoped
    def outer(stream=None, then=None):
        seen.append(cupy.cuda.get_current_stream())
        inner(stream=then or stream)

    outer(stream=a)  # enters a once: inner finds it current
    assert entered == [a] and seen == [a, a]
    entered.clear(), seen.clear()
    with kernels.current(a):
        outer(stream=a)  # a is current: nothing entered
        assert entered == [a] and seen == [a, a]
        outer(stream=a, then=b)  # b is not: inner enters it, and a is current again after
        assert entered == [a, b] and seen == [a, a, a, b]
        inner(stream=a)
        assert entered == [a, b] and seen[-1] is a
    inner(stream=a)  # outside: entered again
    assert entered == [a, b, a] and cupy.cuda.get_current_stream() is cupy.cuda.Stream.null


@pytest.mark.parametrize("shapes", [[(5,), (8,), (3,)], [(3,), (3,), (3,)], [(2, 3)] * 2])
def test_gpu_normal_draws_into_its_output(fake_cupy, monkeypatch, shapes):
    """``random.normal`` of a GPU batch: an even count (a ragged batch's aligned buffer, an
    even dense batch) is drawn by cuRAND straight into the output buffer, all of it, with the
    operator's mean and deviation; an odd count goes through ``RandomState.normal`` and a
    copy, as before."""
    from dlpipe.operators.random import Normal
    from dlpipe.tensors_gpu import SampleList

    cupy = fake_cupy
    calls = []
    monkeypatch.setattr(cupy.cuda.curand, "generateNormal", lambda *a: calls.append(a))
    op = Normal(mean=0.5, stddev=2.0)
    like = SampleList.from_arrays([cupy.ndarray(sh, np.float32) for sh in shapes])
    out = op._draw_on_gpu(like, [(0, 7)], cupy.cuda.Stream())
    assert [tuple(v) for v in out.shapes] == shapes
    buf = out.dense if out.dense is not None else out.owners
    count = buf.reshape(-1).view(np.float32).size  # (the stand-in's view keeps the shape)
    if count % 2:
        assert not calls and cupy.COUNTS["setitem"] == 1
    else:
        assert calls == [(1, buf.data.ptr, count, 0.5, 2.0)] and not cupy.COUNTS["setitem"]
        assert int(out.ptrs[0]) == buf.data.ptr


def test_uploads_of_a_stage_batch_are_cut_from_one_arena(fake_cupy, monkeypatch):
    """Within ``kernels.current(stream, arena)`` the uploads on that stream are cut from one
    buffer (256-byte aligned, disjoint, each copied to its cut), sized after the first batch
    by what the batch cut; uploads on another stream, or outside, allocate as before."""
    from dlpipe import kernels

    cupy = fake_cupy
    made, copies = _record_empty(monkeypatch, cupy), []
    monkeypatch.setattr(cupy.cuda.runtime, "memcpyAsync", lambda *a: copies.append(a))
    stream, other = cupy.cuda.Stream(), cupy.cuda.Stream()
    arena = kernels.Arena(stream)
    tables = [np.arange(n, dtype=np.int64) for n in (40, 3, 100, 1)] + [np.zeros(0, np.int64)]

    def batch():
        made.clear(), copies.clear()
        with kernels.current(stream, arena):
            outs = [kernels.upload(t, stream) for t in tables]
            elsewhere = kernels.upload(tables[0], other)
        return outs, elsewhere

    outs, elsewhere = batch()  # the first batch: the arena holds the first upload only
    assert len(made) == len(tables) + 1 and made[0].nbytes == 512
    assert arena.want == 256 * (2 + 1 + 4 + 1 + 1) and arena.buf is None
    for _ in range(2):
        outs, elsewhere = batch()
        (buf, own) = made  # the arena, and the other stream's upload
        assert buf.nbytes == arena.want and elsewhere is own
        starts = [o.data.ptr - buf.data.ptr for o in outs]
        assert starts == [0, 512, 768, 1792, 2048]
        assert [(o.shape, o.dtype) for o in outs] == [(t.shape, t.dtype) for t in tables]
        sent = [(dst, size) for dst, _, size, _, _ in copies]
        want = [(o.data.ptr, t.nbytes) for o, t in zip(outs, tables, strict=True) if t.nbytes]
        assert sent == [*want, (own.data.ptr, 320)]
    made.clear()
    kernels.upload(tables[0], stream)  # outside the batch
    assert len(made) == 1 and made[0].shape == (40,)


def test_gpu_stage_uploads_go_to_one_allocation_a_batch(fake_cupy, monkeypatch):
    """The GPU stage of a speech graph: from the second batch on, every descriptor upload
    lands in one allocation (the stage's arena)."""
    from dlpipe import fn, pipeline_def

    cupy = fake_cupy
    dests = []
    real = cupy.cuda.runtime.memcpyAsync

    def memcpy(dst, src, size, kind, stream):
        dests.append((dst, size))
        return real(dst, src, size, kind, stream)

    monkeypatch.setattr(cupy.cuda.runtime, "memcpyAsync", memcpy)
    clips = [cupy.ndarray((16000 + 997 * i,), np.float32) for i in range(6)]

    @pipeline_def(batch_size=6, num_threads=1, device_id=0, exec_async=False,
                  exec_pipelined=False, prefetch_queue_depth=1)  # fmt: skip
    def pipe_def():
        audio = fn.external_source(source=lambda: clips, device="gpu", batch=True)
        audio = fn.preemphasis_filter(audio, preemph_coeff=0.97)
        spec = fn.spectrogram(audio, nfft=512, window_length=320, window_step=160)
        return fn.to_decibels(fn.mel_filter_bank(spec, nfilter=64), cutoff_db=-80.0)

    pipe = pipe_def()
    pipe.build()
    pipe.run()
    for _ in range(2):
        dests.clear()
        cupy.COUNTS.clear()
        pipe.run()
        assert len(dests) == 5  # the copy's, preemphasis', spectrogram's, mel's, decibels'
        lo = min(d for d, _ in dests)
        hi = max(d + size for d, size in dests)
        assert hi - lo < 1 << 20  # (the stand-in spaces allocations 1 MiB apart)
        # the outputs (copy, preemphasis, spectrogram, mel, decibels), the spectrogram's
        # frames and their FFT, the decibels' per-sample maxima and the arena
        assert cupy.COUNTS["empty"] == 9


def test_ragged_layout_of_any_rank_is_aligned_offsets_and_c_strides():
    """``ragged_layout``'s 1-D and 2-D shortcuts and its general path: each sample at the
    running total of the ones before, each rounded up to 256 bytes; C strides."""
    from dlpipe.kernels._batch import c_strides, ragged_layout

    rng = np.random.default_rng(5)
    for _ in range(200):
        ndim, n = int(rng.integers(1, 5)), int(rng.integers(1, 9))
        shapes = rng.integers(0, 40, (n, ndim)).astype(np.int64)
        for itemsize in (1, 2, 4, 8):
            offsets, total, strides = ragged_layout(shapes, itemsize)
            padded = [-(-int(np.prod(sh)) * itemsize // 256) * 256 for sh in shapes]
            assert offsets.dtype == np.uint64 and not offsets.flags.writeable
            assert offsets.tolist() == np.cumsum([0, *padded[:-1]]).tolist()
            assert total == (sum(padded) or 1)
            assert strides.tolist() == c_strides(shapes).tolist()


def test_host_address_is_the_first_byte():
    """``kernels.host_address``: what ``ndarray.ctypes.data`` gives, writable or not, of
    contiguous arrays of any type, views into a larger array included."""
    from dlpipe.kernels import host_address

    base = np.arange(64, dtype=np.int64)
    for a in (base, base[5:9], base.view(np.uint8)[3:20], np.zeros(3, np.dtype([("p", "<i8")]))):
        assert host_address(a) == a.ctypes.data
        b = a.copy()
        b.flags.writeable = False
        assert host_address(b) == b.ctypes.data
