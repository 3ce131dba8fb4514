#!/usr/bin/env bash
# The GPU test suite: run on a machine with a CUDA GPU, CuPy and nvImageCodec (see
# ../shared/device/README.md). CI has no GPU; there these tests are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c "import cupy; print('GPU:', cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())"
python3 -m pytest -m "gpu or multi_gpu" tests -q -p no:cacheprovider "$@"
