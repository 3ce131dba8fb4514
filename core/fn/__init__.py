"""The functional API: ``fn.readers.file(...)``, ``fn.decoders.image(...)``, ``fn.resize(...)``.

Generated from the operator registry, so every registered operator appears here, with the
deprecated names DALI still accepts (``fn.image_decoder``, ``fn.coin_flip``, ...: see
``_aliases.py``).
"""

import sys

from .._aliases import available as _available
from .._registry import load_all
from ..graph import REGISTRY, attach, make_alias_fn, make_fn

load_all()  # every operator registers itself
for _schema in sorted(REGISTRY):
    if not _schema.startswith("_"):
        attach(sys.modules[__name__], _schema, make_fn(_schema))
for _alias, (_schema, _) in _available(REGISTRY).items():
    attach(sys.modules[__name__], _alias, make_alias_fn(_alias, _schema))

del load_all, REGISTRY, attach, make_fn, make_alias_fn, sys
