"""``examples/jax_train.py`` trains for a few steps (sharded over the 4 CPU devices)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")

pytestmark = pytest.mark.jax

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "jax_train.py"


def test_example_runs_three_steps(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("jax_train_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--steps", "3", "--batch-size", "8", "--per-class", "4", "--threads", "1"]
    losses = module.main([*argv, "--data", str(tmp_path)])
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    out = capsys.readouterr().out
    devices = jax.devices()
    assert f"{len(devices)} {devices[0].platform} device(s), global batch 8" in out
    assert "step    3" in out
