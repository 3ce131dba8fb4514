#!/usr/bin/env bash
# The CPU test suite (what CI runs): install dlpipe with its test needs, lint, run pytest.
# The frameworks the plugin tests need are pinned here, CPU builds only (an unpinned torch pulls
# GBs of CUDA packages); the package itself does not pin them.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test]"
python3 -m pip install -q --disable-pip-version-check "torch==2.13.0" "jax==0.10.2" \
  "jaxlib==0.10.2" "optax==0.2.8" "tensorflow-cpu==2.21.0" "av==18.1.0"
ruff check core plugins tests examples ci
ruff format --check core plugins tests examples ci
python3 -m pytest -q -m "not gpu and not multi_gpu" tests "$@"
