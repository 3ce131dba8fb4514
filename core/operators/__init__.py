"""Operators, one a file, each with its CPU implementation (and GPU one beside it).

Importing this package imports every module in it (and in ``readers``/``decoders``), so each
operator registers itself; ``fn`` and ``ops`` are generated from that registry.
"""

from __future__ import annotations

import importlib
import pkgutil


def load_all() -> None:
    from .. import decoders, readers

    for pkg in (readers, decoders, __import__(__name__, fromlist=["_"])):
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_") or info.name == "_copy":
                importlib.import_module(f"{pkg.__name__}.{info.name}")


load_all()
