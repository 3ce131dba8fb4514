#!/usr/bin/env bash
# Benchmarks (run on the GPU machine; see BENCHMARKS.md): the CPU engine at every thread count,
# then the GPU engine when a GPU is present. One ImageNet-like synthetic set serves both.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${DLPIPE_BENCH_DATA:-/tmp/dlpipe-bench/imagenet-like}
python3 ci/bench_cpu.py --data "$DATA" --peer "$@"
if [ -f ci/bench_gpu.py ] && python3 -c "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0" 2>/dev/null; then
  python3 ci/bench_kernels.py
  python3 ci/bench_gpu.py --data "$DATA"
fi
# The video readers (GPU NVDEC against a PyAV loader) where PyAV and PyNvVideoCodec are
# installed: on the lent machine that takes a call of its own (the wheels; BENCHMARKS.md).
if [ -f ci/bench_video.py ] && python3 -c "import av, PyNvVideoCodec" 2>/dev/null; then
  python3 ci/bench_video.py
fi
