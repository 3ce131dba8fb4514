"""The legacy class API: ``ops.readers.File(...)``, ``ops.FileReader(...)``, ``ops.Resize(...)``.

An object holds the arguments; each call adds an operator instance to the current pipeline.
Generated from the operator registry (with the deprecated class names of ``_aliases.py``).
"""

import sys

from .._aliases import available as _available
from .._registry import load_all
from ..graph import LEGACY_NAMES, REGISTRY, attach, make_ops_class

_classes = {}
load_all()  # every operator registers itself
for _schema in sorted(REGISTRY):
    if not _schema.startswith("_"):
        _classes[_schema] = make_ops_class(_schema)
        attach(sys.modules[__name__], _schema, _classes[_schema], _classes[_schema].__name__)
for _alias, _schema in LEGACY_NAMES.items():
    setattr(sys.modules[__name__], _alias, _classes[_schema])
for _schema, _name in _available(REGISTRY).values():
    if not hasattr(sys.modules[__name__], _name):
        setattr(sys.modules[__name__], _name, _classes[_schema])

del load_all, LEGACY_NAMES, REGISTRY, attach, make_ops_class, sys
