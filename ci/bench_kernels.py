"""GPU kernel timings: each batched kernel on one batch of 128 images, host and GPU time per
launch (``cupyx.profiler.benchmark``, 50 runs after 5 warm-ups). The inputs are random images
of 150-600 px a side (the crop windows of the ResNet-50 pipeline) and their 224x224 resize,
and large images of 600-2000 px a side (shrinking them takes the widest filters).

    python ci/bench_kernels.py
"""

from __future__ import annotations

import cupy
import numpy as np
from cupyx.profiler import benchmark

from dlpipe.cli import MEAN, STD
from dlpipe.kernels.color import color_matrix_batch
from dlpipe.kernels.resize import resize_batch
from dlpipe.kernels.slice import cast_batch, slice_normalize_batch
from dlpipe.tensors_gpu import SampleList


def main() -> None:
    rng = np.random.default_rng(0)

    def images(lo, hi):
        sides = rng.integers(lo, hi, (128, 2))
        return SampleList.from_arrays(
            [cupy.asarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in sides], 0
        )

    crops, large = images(150, 600), images(600, 2000)
    stream = cupy.cuda.Stream(non_blocking=True)
    size = np.full((128, 2), 224)
    mul = [1 / s for s in STD]
    twist = np.tile(np.eye(3) * 0.9, (128, 1, 1))
    with stream:
        small = resize_batch(crops, size, stream=stream)
        cases = [
            (
                "resize 128 crops -> 224x224 (antialiased)",
                lambda: resize_batch(crops, size, stream=stream),
            ),
            (
                "resize 128 images of 600-2000 px -> 224x224 (antialiased, 9-18 taps)",
                lambda: resize_batch(large, size, stream=stream),
            ),
            (
                "resize 128 crops -> 640x640",
                lambda: resize_batch(crops, np.full((128, 2), 640), stream=stream),
            ),
            (
                "crop_mirror_normalize 224 -> fp16 CHW",
                lambda: slice_normalize_batch(
                    small,
                    224,
                    224,
                    mean=MEAN,
                    mul=mul,
                    out_dtype=np.float16,
                    planar=True,
                    stream=stream,
                ),
            ),
            ("cast 224x224 uint8 -> fp16", lambda: cast_batch(small, np.float16, stream=stream)),
            (
                "color matrix 224x224 (color_twist)",
                lambda: color_matrix_batch(small, twist, np.zeros((128, 3)), stream=stream),
            ),
        ]
        print("| kernel (batch of 128) | host ms | GPU ms |\n|---|---|---|")
        for name, fn in cases:
            r = benchmark(fn, n_repeat=50, n_warmup=5)
            print(f"| {name} | {r.cpu_times.mean() * 1e3:.3f} | {r.gpu_times.mean() * 1e3:.3f} |")


if __name__ == "__main__":
    main()
