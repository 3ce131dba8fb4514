"""The record of samples that operators with ``on_error="skip"`` dropped, bounded.

A long run over dirty data may skip millions of samples; keeping a dict per sample (~520
bytes) grew without bound. :class:`SkipLog` keeps counts of every skipped sample (in total
and per operator) and the records of the most recent ``history`` only;
``Pipeline.skipped()`` hands them out as a :class:`SkippedList`.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

__all__ = ["SkipLog", "SkippedList"]


class SkippedList(list):
    """The most recent skipped samples, oldest first (dicts with ``iteration``, ``sample``,
    ``file``, ``operator`` and ``error``), with the counts of all of them.

    Attributes:
        total: how many samples were skipped since the pipeline was built, the records no
            longer kept included.
        by_operator: ``total`` per operator name.

    Example:
        >>> s = pipe.skipped()
        >>> print(f"{s.total} skipped; last: {s[-1]['file'] if s else None}")
    """

    def __init__(self, records: Iterable[dict] = (), total: int = 0, by_operator=None):
        super().__init__(records)
        self.total = total
        self.by_operator = dict(by_operator or {})

    @property
    def dropped(self) -> int:
        """How many records were let go to keep the list bounded (``total - len(self)``)."""
        return self.total - len(self)


class SkipLog:
    """Counts of every skipped sample and the records of the last ``history`` of them.

    Args:
        history: records kept (the most recent); 0 keeps counts only.
    """

    def __init__(self, history: int = 1000):
        self.total = 0
        self.by_operator: Counter[str] = Counter()
        self.recent: deque[dict] = deque(maxlen=max(0, int(history)))

    def __iadd__(self, records: Iterable[dict]) -> SkipLog:
        """``log += records`` (what the executor does as each batch is handed out)."""
        for r in records:
            self.total += 1
            self.by_operator[r["operator"]] += 1
            self.recent.append(r)
        return self

    def __len__(self) -> int:
        return self.total

    def snapshot(self) -> SkippedList:
        """The records kept and the counts, as a list the caller may keep."""
        return SkippedList(self.recent, self.total, self.by_operator)
