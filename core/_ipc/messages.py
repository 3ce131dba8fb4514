"""The messages every helper speaks, whatever it serves. A helper's own messages are
dataclasses in its server's module (``readers/_read_server.py``, ``decoders/_decode_server.py``),
which the pipeline's side imports too; both sides stay in one file."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hello:
    """The first message, a request: which module serves (its ``handler(**args)`` makes the
    ``handle`` function), and the module search path it needs beyond the standard library
    (the pipeline process's ``sys.path``; empty for a stdlib-only server)."""

    module: str
    args: dict = field(default_factory=dict)
    path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ready:
    """The reply to :class:`Hello`: the server runs. ``cache_tag`` is its Python's
    (``cpython-311``): it must be the pipeline's."""

    pid: int
    cache_tag: str


@dataclass(frozen=True)
class Failed:
    """The reply to a request that raised in the server (or to the next request, after a
    notification that raised): the exception's type name, message and the server's
    traceback."""

    error: str
    message: str
    traceback: str

    @classmethod
    def of(cls, exc: BaseException) -> Failed:
        import traceback

        return cls(type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)))


@dataclass(frozen=True)
class Stop:
    """A notification: end now (as at the end of the pipe)."""
