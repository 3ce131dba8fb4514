"""No imports upward in ``core/``: an ast walk over every module (imports inside functions
included).

Top to bottom: plugins -> iterator -> pipeline -> graph / executor -> operators, readers,
decoders -> kernels, ``_ipc``, ``_geometry`` -> tensors, types, errors, options. A module may
import its own layer and those below it, never one above; the three operator packages do not
import each other (``_registry`` loads them all, from above).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

CORE = pathlib.Path(__file__).resolve().parents[2] / "core"

# The top-level names of ``dlpipe`` above the operator packages: no operator package, kernel or
# helper-process module may import one of them.
_ENGINE = {"pipeline", "executor", "executor_gpu", "iterator", "fn", "ops", "_registry", "cli"}
_BOTTOM = {"errors", "types", "options"}

# package -> the top-level names of dlpipe its modules must not import
FORBIDDEN = {
    "kernels": _ENGINE | {"operators", "readers", "decoders", "graph"},
    "operators": _ENGINE | {"readers", "decoders"},
    "decoders": _ENGINE | {"operators"},
    "readers": _ENGINE | {"operators"},
    "_geometry": _ENGINE | {"operators", "readers", "decoders", "kernels", "graph", "_ipc"},
    "_audio": _ENGINE | {"operators", "readers", "decoders", "kernels", "graph", "_ipc"},
}


def _allowed_only(package: str) -> set[str] | None:
    """The only dlpipe names ``package`` may import (None: see FORBIDDEN)."""
    if package == "_ipc":
        return _BOTTOM | {"_ipc"}
    return None


def imported(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, top-level dlpipe name) of every import of a dlpipe module in ``path``; relative
    imports are resolved against the module's place in ``core/``."""
    rel = path.relative_to(CORE)
    package = list(rel.parts[:-1])  # the module's package (an __init__'s: its directory)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[list[str]] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                if node.level - 1 > len(package):
                    continue
                mod = node.module.split(".") if node.module else []
                full = ["dlpipe", *base, *mod]
                if mod:
                    names = [full]
                else:  # from . import x, y
                    names = [[*full, a.name] for a in node.names]
            elif node.module:
                names = [node.module.split(".")]
        for parts in names:
            if parts[0] == "dlpipe" and len(parts) > 1:
                out.append((node.lineno, parts[1]))
    return out


def violations() -> list[str]:
    found = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE)
        if len(rel.parts) < 2:
            continue  # top-level modules: graph, pipeline, ... (the engine)
        package = rel.parts[0]
        only = _allowed_only(package)
        banned = FORBIDDEN.get(package, set())
        for line, name in imported(path):
            if name == package:
                continue
            if (only is not None and name not in only) or name in banned:
                found.append(f"core/{rel}:{line} imports dlpipe.{name}")
    return found


def test_no_upward_imports():
    assert violations() == []


@pytest.mark.parametrize(
    ("source", "where", "bad"),
    [
        ("from ..operators.flip import x\n", "kernels/k.py", "operators"),
        ("from ..operators import cast\n", "decoders/d.py", "operators"),
        ("def f():\n    from dlpipe.operators import x\n", "readers/r.py", "operators"),
        ("from .. import graph\n", "_ipc/p.py", "graph"),
        ("from ...operators import x\n", "kernels/sub/k.py", "operators"),
    ],
)
def test_the_walk_finds_upward_imports(tmp_path, monkeypatch, source, where, bad):
    # the checker itself: an upward import written in a module of a scratch tree is found
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    monkeypatch.setattr(f"{__name__}.CORE", tmp_path)
    assert [v.split()[-1] for v in violations()] == [f"dlpipe.{bad}"]
