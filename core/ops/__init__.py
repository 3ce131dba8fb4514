"""The legacy class API: ``ops.readers.File(...)``, ``ops.FileReader(...)``, ``ops.Resize(...)``.

An object holds the arguments; each call adds an operator instance to the current pipeline.
Generated from the operator registry.
"""

from __future__ import annotations

import sys

from .. import operators as _operators  # noqa: F401  (registers every operator)
from ..graph import LEGACY_NAMES, REGISTRY, attach, make_ops_class, schema_to_class_name

_classes = {}
for _schema in sorted(REGISTRY):
    if not _schema.startswith("_"):
        _classes[_schema] = make_ops_class(_schema)
        _last = _schema.rsplit(".", 1)[-1]
        attach(sys.modules[__name__], _schema, _classes[_schema], schema_to_class_name(_last))
for _alias, _schema in LEGACY_NAMES.items():
    setattr(sys.modules[__name__], _alias, _classes[_schema])

del LEGACY_NAMES, REGISTRY, attach, make_ops_class, schema_to_class_name, sys
