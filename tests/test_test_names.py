"""Test modules are imported by basename (the test folders are not packages), so two files
of one name in different folders stop the whole collection: keep the names unique."""

from __future__ import annotations

import collections
import pathlib


def test_test_module_names_are_unique():
    tests = pathlib.Path(__file__).resolve().parent
    names = collections.Counter(
        p.name for p in tests.rglob("test_*.py") if not (p.parent / "__init__.py").exists()
    )
    assert [n for n, c in names.items() if c > 1] == []
