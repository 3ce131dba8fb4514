"""The GPU stage's host work, timed without a GPU: DALI's EfficientNet training pipeline (its
``processing_training_pipe`` after the decode and resize: flip, AutoAugment's ImageNet policy or
TrivialAugment Wide through conditionals, crop_mirror_normalize) run by dlpipe's own executor
against a stand-in CuPy (``ci/fake_cupy``) that only counts kernels, uploads and allocations.

    python3 ci/gpu_host_model.py --aug autoaugment --iters 30 [--profile | --profile-cpu] [--resize]
    python3 ci/gpu_host_model.py --graph ops --cells source,blur,slice-rel,norm-fixed

``--graph ops`` runs instead the cells of ``ci/bench_dali_ops.py`` (its pipelines, an
``external_source(device="gpu")`` of 64 ragged 400-640 px images, then one operator), one
after the other. ``--graph speech`` runs the GPU part of DeepLearningExamples' Jasper pipeline
(``ci/bench_dali_speech.py``): 32 trimmed utterances of 1-16 s at 16 kHz, the dither,
preemphasis, spectrogram, mel filter bank, decibels, shapes, normalize over time, pad to 16,
and in training (``--aug train``) SpecAugment's erase. ``--graph nemo``: the GPU part of NeMo's
``AudioToCharDALIDataset`` on the same utterances (``build_nemo``).

Prints the GPU stage's CPU time per batch (``GpuStage.__call__``, thread time: what the host
spends enqueueing, whatever the GPU does; and the part of it the garbage collector's passes
took, which the stage's allocations trigger), the CPU stage's (``Executor._run_cpu``: the
parameters drawn and the CPU operators, e.g. the augmentations' random numbers, predicates and
magnitudes; the thread "dlpipe-cpu-stage" of an asynchronous pipeline), the host time of each
operator's ``run_batch``, and
the counts per batch of kernel launches, host-to-device uploads and device allocations. The
images are 224x224x3 uint8, as the example's after its resize (``--resize``: ragged images
and the example's resize to 224x224 first). Real CuPy calls cost more than
the stand-in's (some microseconds each): add them from the counts.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_cupy"))

import cupy  # noqa: E402 (the stand-in)
import numpy as np  # noqa: E402

from dlpipe import fn, pipeline_def, types  # noqa: E402
from dlpipe.auto_aug import auto_augment, trivial_augment  # noqa: E402

SIZE = 224


def build(aug: str, batch: int, resize: bool = False):
    """The example's pipeline from its flip (``resize``: from its resize, of ragged images as
    the random-crop decoder gives them, 120-480 px a side)."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(120, 481, (batch, 2)) if resize else np.full((batch, 2), SIZE)
    frames = [cupy.ndarray((int(h), int(w), 3), np.uint8) for h, w in sizes]

    @pipeline_def(enable_conditionals=True)
    def pipe_def():
        images = fn.external_source(source=lambda: frames, device="gpu", batch=True, layout="HWC")
        if resize:  # the example's, with its bicubic interpolation
            images = fn.resize(images, size=[SIZE, SIZE], interp_type=types.INTERP_CUBIC,
                               antialias=False)  # fmt: skip
        images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
        if aug == "autoaugment":
            images = auto_augment.auto_augment_image_net(images, shape=[SIZE, SIZE])
        else:
            images = trivial_augment.trivial_augment_wide(images, shape=[SIZE, SIZE])
        return fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="HWC",
            crop=(SIZE, SIZE),
            mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
            std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
        )

    # synchronous: the stages run in this thread, one after the other
    pipe = pipe_def(batch_size=batch, num_threads=1, device_id=0, seed=7, exec_async=False,
                    exec_pipelined=False, prefetch_queue_depth=1)  # fmt: skip
    pipe.build()
    return pipe


def build_speech(train: bool, batch: int):
    """The GPU part of DLE Jasper's pipeline (its ``dali_jasper_pipe`` after ``.gpu()``, with
    the configuration ``bench_dali_speech.py`` gives it), on stand-in utterances."""
    rng = np.random.default_rng(0)
    clips = [cupy.ndarray((int(rng.uniform(1, 16) * 16000),), np.float32) for _ in range(batch)]
    anchors = np.zeros((batch, 8), np.float32)
    shapes = np.ones((batch, 8), np.float32)

    @pipeline_def
    def pipe_def():
        audio = fn.external_source(source=lambda: clips, device="gpu", batch=True)
        audio = audio + fn.random.normal(audio) * 0.00001
        audio = fn.preemphasis_filter(audio, preemph_coeff=0.97)
        spec = fn.spectrogram(audio, nfft=512, window_length=320, window_step=160)
        mel = fn.mel_filter_bank(spec, sample_rate=16000, nfilter=64, normalize=True)
        log = fn.to_decibels(mel, multiplier=np.log(10), reference=1.0, cutoff_db=np.log(1e-20))
        length = fn.shapes(log)
        log = fn.normalize(log, axes=[1])
        log = fn.pad(log, axes=[1], fill_value=0, align=16)
        if train:
            a, s = fn.external_source(source=lambda: (list(anchors), list(shapes)), num_outputs=2,
                                      batch=True)  # fmt: skip
            log = fn.erase(log, anchor=a, shape=s, axes=[0, 1], fill_value=0,
                           normalized_anchor=True)  # fmt: skip
        return log, length

    pipe = pipe_def(batch_size=batch, num_threads=1, device_id=0, seed=7, exec_async=False,
                    exec_pipelined=False, prefetch_queue_depth=1)  # fmt: skip
    pipe.build()
    return pipe


def build_nemo(batch: int):
    """The GPU part of NeMo's ``AudioToCharDALIDataset`` (after ``.gpu()``: dither, preemphasis
    with a zero border, spectrogram with NeMo's Hann window, mel filter bank, the log guard,
    decibels, per-feature normalize with ddof=1, the lengths sliced from the shapes, pad to 16
    features and the longest time) with QuartzNet's preprocessor (``ci/bench_dali_speech.py``'s
    ``NEMO_PREPROCESSOR``), on the same stand-in utterances as ``build_speech``; its training
    and validation graphs are the same."""
    rng = np.random.default_rng(0)
    clips = [cupy.ndarray((int(rng.uniform(1, 16) * 16000),), np.float32) for _ in range(batch)]
    t = np.arange(320)
    window = (0.5 - 0.5 * np.cos(2 * np.pi * t / 319)).tolist()  # torch.hann_window(periodic=False)
    guard = 2**-24

    @pipeline_def
    def pipe_def():
        audio = fn.external_source(source=lambda: clips, device="gpu", batch=True)
        audio = audio + 0.00001 * fn.random.normal(audio)
        audio = fn.preemphasis_filter(audio, preemph_coeff=0.97, border="zero")
        spec = fn.spectrogram(audio, nfft=512, window_length=320, window_step=160,
                              window_fn=window)  # fmt: skip
        spec = fn.mel_filter_bank(spec, sample_rate=16000, nfilter=64, normalize=True,
                                  freq_low=0.0, freq_high=8000.0)  # fmt: skip
        spec = spec + guard
        spec = fn.to_decibels(spec, multiplier=np.log(10), reference=1.0, cutoff_db=np.log(guard))
        spec = fn.normalize(spec, axes=(1,), epsilon=1e-5**2, ddof=1)
        spec_len = fn.slice(fn.shapes(spec), 1, 1, axes=(0,))
        spec = fn.pad(spec, fill_value=0.0, axes=(0, 1), align=(16, 1), shape=(1, -1))
        return spec, spec_len

    pipe = pipe_def(batch_size=batch, num_threads=1, device_id=0, seed=7, exec_async=False,
                    exec_pipelined=False, prefetch_queue_depth=1)  # fmt: skip
    pipe.build()
    return pipe


def build_ops(cell: str):
    """The ``ci/bench_dali_ops.py`` cell's dlpipe pipeline on stand-in CuPy arrays of the
    bench's image shapes, run synchronously."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_dali_ops

    batch, lo, hi = bench_dali_ops.sizes(cpu=False)
    dtype = np.dtype(bench_dali_ops.CELLS[cell][2])
    shapes = [im.shape for im in bench_dali_ops.load_images(batch, lo, hi)]
    images = [cupy.ndarray(shape, dtype) for shape in shapes]
    pipe = bench_dali_ops.build_pipeline("dlpipe", cell, images, "gpu", batch, fixed=False,
                                         exec_async=False, exec_pipelined=False,
                                         prefetch_queue_depth=1)  # fmt: skip
    pipe.build()
    return pipe


def measure(pipe, name: str, iters: int, profile: bool, cpu_profile: bool = False) -> None:
    """Run ``pipe`` ``iters`` times (after 3 warm-up runs) and print its GPU stage's host
    time, its CPU stage's (``Executor._run_cpu``, thread time), its counts and its operators'
    times; ``profile``: a cProfile of the GPU stage, or with ``cpu_profile`` of the CPU
    stage."""
    executor = pipe._executor
    stage = executor.gpu_stage
    spent: list[float] = []
    cpu_spent: list[float] = []
    op_time: collections.Counter = collections.Counter()
    op_calls: collections.Counter = collections.Counter()
    prof = [None]
    call = type(stage).__call__

    def timed_call(self, ws):
        if prof[0] is not None and not cpu_profile:
            prof[0].enable()
        start = time.thread_time()
        in_stage[0] = True
        try:
            out = call(self, ws)
        finally:
            in_stage[0] = False
        spent.append(time.thread_time() - start)
        if prof[0] is not None and not cpu_profile:
            prof[0].disable()
        return out

    type(stage).__call__ = timed_call
    # the garbage collector's passes that start in the GPU stage (its allocations trigger them;
    # part of the stage's thread time above)
    in_stage, gc_spent, gc_start = [False], [0.0, 0], [0.0]

    def on_gc(phase, info):
        if not in_stage[0]:
            return
        if phase == "start":
            gc_start[0] = time.thread_time()
        else:
            gc_spent[0] += time.thread_time() - gc_start[0]
            gc_spent[1] += 1

    run_cpu = executor._run_cpu

    def timed_cpu(*a, **k):  # the CPU stage (thread "dlpipe-cpu-stage" when asynchronous)
        if prof[0] is not None and cpu_profile:
            prof[0].enable()
        start = time.thread_time()
        try:
            return run_cpu(*a, **k)
        finally:
            cpu_spent.append(time.thread_time() - start)
            if prof[0] is not None and cpu_profile:
                prof[0].disable()

    executor._run_cpu = timed_cpu
    for node in stage.ops:
        run_batch = node.op.run_batch

        def timed(*a, _run=run_batch, _schema=node.op.schema, **k):
            start = time.thread_time()
            try:
                return _run(*a, **k)
            finally:
                op_time[_schema] += time.thread_time() - start
                op_calls[_schema] += 1

        node.op.run_batch = timed
    for _ in range(3):  # compile (count) every kernel, fill the memos
        pipe.run()
    spent.clear()
    cpu_spent.clear()
    op_time.clear()
    op_calls.clear()
    cupy.COUNTS.clear()
    if profile:
        prof[0] = cProfile.Profile()
    gc.callbacks.append(on_gc)
    try:
        for _ in range(iters):
            pipe.run()
    finally:
        gc.callbacks.remove(on_gc)
    type(stage).__call__ = call
    del executor._run_cpu
    k = iters
    print(f"{name}: GPU stage host CPU ms/batch: "
          f"median {1e3 * np.median(spent):.2f}, mean {1e3 * np.mean(spent):.2f}")  # fmt: skip
    print(f"{name}: of which garbage collection ms/batch: {1e3 * gc_spent[0] / k:.2f} "
          f"({gc_spent[1] / k:.2f} passes a batch)")  # fmt: skip
    counts = {n: round(v / k, 1) for n, v in sorted(cupy.COUNTS.items()) if ":" not in n}
    print(f"{name}: CPU stage CPU ms/batch: "
          f"median {1e3 * np.median(cpu_spent):.2f}, mean {1e3 * np.mean(cpu_spent):.2f}")  # fmt: skip
    print("per batch:", counts)
    kernels = {n[7:]: round(v / k, 1) for n, v in sorted(cupy.COUNTS.items()) if ":" in n}
    print("launches per batch:", kernels)
    print("run_batch host ms/batch (calls/batch):")
    for schema, t in op_time.most_common():
        print(f"  {schema:32s} {1e3 * t / k:7.3f}  ({op_calls[schema] / k:.1f})")
    print(f"  {'all operators':32s} {1e3 * sum(op_time.values()) / k:7.3f}")
    if prof[0] is not None:
        out = io.StringIO()
        pstats.Stats(prof[0], stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", choices=["efficientnet", "ops", "speech", "nemo"],
                    default="efficientnet")  # fmt: skip
    ap.add_argument("--aug", choices=["autoaugment", "trivialaugment", "train", "val"],
                    default="autoaugment", help="efficientnet: the policy; speech: the split")  # fmt: skip
    ap.add_argument("--cells", default="source,source-f32,blur,blur-rand,slice-rel,slice-rand,"
                    "norm-fixed,norm-axes", help="--graph ops: bench_dali_ops cells")  # fmt: skip
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--profile", action="store_true", help="cProfile of the GPU stage")
    ap.add_argument("--resize", action="store_true",
                    help="efficientnet: start at the resize, of ragged images")  # fmt: skip
    ap.add_argument("--profile-cpu", action="store_true", help="cProfile of the CPU stage")
    args = ap.parse_args()
    if args.graph == "ops":
        for cell in args.cells.split(","):
            measure(build_ops(cell), cell, args.iters, args.profile)
        return
    if args.graph == "speech":
        batch = 32 if args.batch == 128 else args.batch  # DLE's batch
        measure(build_speech(args.aug == "train", batch), f"Jasper {args.aug}", args.iters,
                args.profile)  # fmt: skip
        return
    if args.graph == "nemo":
        batch = 32 if args.batch == 128 else args.batch
        measure(build_nemo(batch), "NeMo", args.iters, args.profile)
        return
    pipe = build(args.aug, args.batch, args.resize)
    name = f"{args.aug}{', resize' if args.resize else ''}, batch {args.batch}"
    measure(pipe, name, args.iters, args.profile or args.profile_cpu, args.profile_cpu)


if __name__ == "__main__":
    main()
