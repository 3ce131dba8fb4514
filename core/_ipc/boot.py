"""The script every helper process runs: ``python -I -S .../dlpipe/_ipc/boot.py``.

``-I -S``: no user site, no ``PYTHON*`` variables, no ``site`` (no ``.pth`` files), no script
directory on the path: the helper imports the standard library and what its ``Hello`` names,
nothing else. ``dlpipe`` is made a package here without running its ``__init__`` (which loads
every operator, OpenCV and Pillow): a read server imports four stdlib-only modules of dlpipe,
a decode server the handful it decodes with.

SIGINT is ignored before anything else: a terminal's Ctrl-C reaches the pipeline's process (the
helpers run in their own session, and ignore it should it come anyway), which may catch it and
go on using them.
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

import importlib.util  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def main() -> None:
    core = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "dlpipe", os.path.join(core, "__init__.py"), submodule_search_locations=[core]
    )
    sys.modules["dlpipe"] = importlib.util.module_from_spec(spec)  # not executed
    from dlpipe._ipc.server import main as serve

    serve()


if __name__ == "__main__":
    main()
