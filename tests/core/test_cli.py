"""``dlpipe demo`` runs end to end on its synthetic dataset and writes the batch picture."""

from __future__ import annotations

import os
import subprocess
import sys

import cv2


def test_demo_runs_and_writes_a_grid(tmp_path):
    env = {**os.environ, "DLPIPE_CACHE": str(tmp_path / "cache")}
    cmd = [
        sys.executable,
        "-m",
        "dlpipe",
        "demo",
        "--device",
        "cpu",
        "--batch",
        "8",
        "--iters",
        "3",
        "--threads",
        "2",
        "--size",
        "64",
        "--out",
        str(tmp_path),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "img/s" in out.stdout and "512 images" in out.stdout
    grid = cv2.imread(str(tmp_path / "demo_batch.png"))
    assert grid is not None and grid.shape == (160, 8 * 160, 3)
    # a second run reuses the cached dataset
    out2 = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert out2.returncode == 0, out2.stderr
