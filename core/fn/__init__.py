"""The functional API: ``fn.readers.file(...)``, ``fn.decoders.image(...)``, ``fn.resize(...)``.

Generated from the operator registry, so every registered operator appears here.
"""

import sys

from .. import operators as _operators  # noqa: F401  (registers every operator)
from ..graph import REGISTRY, attach, make_fn

for _schema in sorted(REGISTRY):
    if not _schema.startswith("_"):
        attach(sys.modules[__name__], _schema, make_fn(_schema))

del REGISTRY, attach, make_fn, sys
