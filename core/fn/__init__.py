"""The functional API: ``fn.readers.file(...)``, ``fn.decoders.image(...)``, ``fn.resize(...)``.

Generated from the operator registry, so every registered operator appears here.
"""

import sys

from .._registry import load_all
from ..graph import REGISTRY, attach, make_fn

load_all()  # every operator registers itself
for _schema in sorted(REGISTRY):
    if not _schema.startswith("_"):
        attach(sys.modules[__name__], _schema, make_fn(_schema))

del load_all, REGISTRY, attach, make_fn, sys
