"""``dlpipe.plugins.base_iterator``: DALI's ``nvidia.dali.plugin.base_iterator`` path.

``LastBatchPolicy`` and the framework-neutral iterator (``_DaliBaseIterator`` in DALI) live in
``dlpipe.iterator``; this module names them where ported code imports them from.

Example:
    >>> from dlpipe.plugins.base_iterator import LastBatchPolicy
"""

from __future__ import annotations

from dlpipe.iterator import BaseIterator, LastBatchPolicy

_DaliBaseIterator = BaseIterator

__all__ = ["BaseIterator", "LastBatchPolicy"]
