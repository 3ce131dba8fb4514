"""The error hierarchy: one :class:`DlpipeError` base; each leaf also subclasses the builtin
that a caller would naturally catch (``ValueError``, ``FileNotFoundError``, ...)."""

from __future__ import annotations


class DlpipeError(Exception):
    """Base of every error dlpipe raises on purpose."""


class ArgumentError(DlpipeError, ValueError):
    """An operator or pipeline argument is invalid; the message names it and its value."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type (``batch_size="8"``); a ``TypeError`` as well, as Python
    raises for one, and an :class:`ArgumentError` like every bad argument."""


class DataNotFoundError(DlpipeError, FileNotFoundError):
    """A file or directory named by the user does not exist or holds no usable data."""


class DecodeError(DlpipeError, ValueError):
    """A sample could not be decoded (corrupt, truncated or unsupported data)."""


class DeviceError(DlpipeError, RuntimeError):
    """The graph needs a GPU (or a GPU library) that is not available."""


class PipelineError(DlpipeError, RuntimeError):
    """Misuse of the pipeline API, or an unexpected failure inside a worker thread."""


class MissingExtraError(DlpipeError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class SampleSkipped(DlpipeError):
    """Raised by an operator with ``on_error="skip"`` for a sample it drops. The executor
    replaces the sample (every output of it) with a good one of the same batch and records it
    in ``pipe.skipped()``; it never reaches the user."""


def require_extra(module: str, extra: str):
    """Import ``module`` or raise :class:`MissingExtraError` naming ``pip install "dlpipe[extra]"``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{module!r} is needed here but cannot be imported ({e}); "
            f'install it with: pip install "dlpipe[{extra}]"'
        ) from e
