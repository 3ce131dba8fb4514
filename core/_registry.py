"""Loads every operator module, so that each registers itself (``graph.register``); ``fn`` and
``ops`` are generated from that registry.

It sits above ``operators``, ``readers`` and ``decoders`` (they import ``graph``, never this),
so none of them imports another package of operators to fill the registry.
"""

from __future__ import annotations

import importlib
import pkgutil


def load_all() -> None:
    """Import every public module of ``readers``, ``decoders`` and ``operators`` (and the
    private ``operators._copy``, which registers the hidden ``_copy_to_gpu``). Idempotent."""
    from . import decoders, operators, readers

    for pkg in (readers, decoders, operators):
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_") or info.name == "_copy":
                importlib.import_module(f"{pkg.__name__}.{info.name}")
