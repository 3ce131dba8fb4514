#!/usr/bin/env bash
# Multi-GPU checks (run on a machine with 2+ GPUs): the rank-coverage check and the other
# multi_gpu tests over NCCL, the 1 -> N GPU scaling, then DDP training with one pipeline per
# process. Extra arguments go to ci/bench_scaling.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
N=$(python3 -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())")
echo "GPUs: $N"
python3 -m pytest -q -p no:cacheprovider -m multi_gpu tests
python3 ci/bench_scaling.py "$@"
torchrun --standalone --nproc_per_node "$N" examples/torchrun_train.py --device gpu --steps 20 \
  --batch-size 64 --image-size 128
