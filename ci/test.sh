#!/usr/bin/env bash
# The CPU test suite (what CI runs): install dlpipe with its test needs, lint, run pytest.
# PyTorch is pinned to the CPU build 2.13.0 here (an unpinned torch pulls GBs of CUDA packages);
# the package itself does not pin it.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e ".[test]"
python3 -m pip install -q --disable-pip-version-check "torch==2.13.0"
ruff check core plugins tests examples ci
ruff format --check core plugins tests examples ci
python3 -m pytest -q -m "not gpu and not multi_gpu" tests "$@"
