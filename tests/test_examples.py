"""Smoke tests: every script in examples/ runs as written, on CPU, for a few steps.

Each script runs in a subprocess on tiny synthetic data (written under the test's tmp dir).
A script whose framework (torch, jax, tensorflow) is not installed is skipped; a script with
no entry in ``RUNS`` yet is skipped with a note (add its CPU flags here).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FRAMEWORKS = {"torch": "torch", "jax": "jax", "tensorflow": "tf"}

# script -> (command after the interpreter, with {script} and {tmp}; text the output must hold)
RUNS: dict[str, tuple[list[str], str]] = {
    "multigpu_sharding.py": (
        ["{script}", "--device", "cpu", "--out", "{tmp}", "--batch-size", "4"],
        "files in more than one shard: 0; files covered: 36 of 36",
    ),
    "jax_train.py": (
        ["{script}", "--steps", "3", "--per-class", "8", "--batch-size", "8", "--data", "{tmp}"],
        "step    3",
    ),
    "tf_distribute.py": (
        ["{script}", "--steps", "2", "--epochs", "1", "--batch-size", "4"],
        "final loss",
    ),
    "torchrun_train.py": (
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            "2",
            "{script}",
            "--device",
            "cpu",
            "--steps",
            "2",
            "--synthetic-per-class",
            "8",
            "--batch-size",
            "4",
            "--image-size",
            "32",
        ],
        "steps per rank [2, 2]",
    ),
}


def _frameworks(script: Path) -> list[str]:
    text = script.read_text()
    return [
        name
        for name in FRAMEWORKS
        if re.search(rf"^\s*(import|from)\s+{name}\b", text, flags=re.MULTILINE)
    ]


def _params():
    for script in sorted(EXAMPLES.glob("*.py")):
        marks = [getattr(pytest.mark, FRAMEWORKS[f]) for f in _frameworks(script)]
        yield pytest.param(script, id=script.name, marks=marks)


@pytest.mark.parametrize("script", list(_params()))
def test_example_runs_on_cpu(script: Path, tmp_path):
    for name in _frameworks(script):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{script.name} needs {name}, which is not installed")
    if script.name not in RUNS:
        pytest.skip(f"no CPU smoke-test flags for {script.name}: add them to RUNS")
    args, expected = RUNS[script.name]
    cmd = [sys.executable] + [a.format(script=script, tmp=tmp_path) for a in args]
    env = {
        **os.environ,
        "TMPDIR": str(tmp_path),  # synthetic data sets go there
        "CUDA_VISIBLE_DEVICES": "",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert out.returncode == 0, f"{' '.join(cmd)}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert expected in out.stdout, out.stdout[-3000:]


def test_sharding_example_in_process(tmp_path):
    """The walkthrough's result: disjoint shards covering the data set, grids written."""
    import cv2

    spec = importlib.util.spec_from_file_location(
        "multigpu_sharding", EXAMPLES / "multigpu_sharding.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = tmp_path / "data"
    from dlpipe.synthetic import make_dataset

    make_dataset(str(root), num_classes=3, per_class=5, size_range=(32, 48))
    result = module.main(
        ["--data", str(root), "--shards", "3", "--batch-size", "2", "--out", str(tmp_path)]
    )
    assert result["num_files"] == 15 and result["overlap"] == 0 and result["covered"] == 15
    assert [len(f) for f in result["files"]] == [6, 6, 6]  # ceil(5 / 2) batches of 2
    for i in range(3):
        grid = cv2.imread(str(tmp_path / f"shard_{i}.png"))
        assert grid.shape == (160, 2 * 160, 3)


# --- the python snippets of docs/*.md ---------------------------------------------------------

DOCS = EXAMPLES.parent / "docs"
_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)
_NEEDS = {"torch": "torch", "jax": "jax", "tensorflow": "tf", "gpu": "gpu"}


def _doc_pages():
    for page in sorted(DOCS.glob("*.md")):
        blocks = _BLOCK.findall(page.read_text())
        if blocks:
            needs = sorted(
                {m for b in blocks for m in re.findall(r"^# needs: (\w+)", b, flags=re.M)}
            )
            marks = [getattr(pytest.mark, _NEEDS[n]) for n in needs if n in _NEEDS]
            yield pytest.param(page, id=page.name, marks=marks)


def _have(need: str) -> bool:
    if need == "gpu":
        from dlpipe.cli import gpu_available

        return gpu_available()
    return importlib.util.find_spec(need) is not None


@pytest.mark.parametrize("page", list(_doc_pages()))
def test_doc_snippets_run(page: Path, tmp_path):
    """Every ``python`` block of a page runs, in order, as one script (blocks whose
    ``# needs: X`` is missing here are left out)."""
    code = []
    for block in _BLOCK.findall(page.read_text()):
        needs = re.findall(r"^# needs: (\w+)", block, flags=re.MULTILINE)
        if all(_have(n) for n in needs):
            code.append(block)
    if not code:
        pytest.skip(f"{page.name}: every snippet needs something missing here")
    script = tmp_path / f"doc_{page.stem.replace('-', '_')}.py"  # not "jax.py": no shadowing
    # the snippets write under /tmp/dlpipe-docs; keep each test's files apart
    script.write_text("\n".join(code).replace("/tmp/dlpipe-docs", str(tmp_path / "docs-data")))
    env = {
        **os.environ,
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    assert out.returncode == 0, f"{page.name}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
