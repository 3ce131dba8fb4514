"""The helper's side: the one serve loop of every helper process.

A server is a module with ``handler(**args)``, which returns a ``handle(message)`` function.
:func:`main` (run by ``boot.py``) reads the :class:`~dlpipe._ipc.messages.Hello`, imports the
module it names and answers :class:`~dlpipe._ipc.messages.Ready`; :func:`serve` then hands
every message to ``handle``, in order, one at a time:

* a request (the ``REPLY`` flag) gets ``handle``'s return value as its reply, or
  :class:`~dlpipe._ipc.messages.Failed` with the server's traceback when it raised;
* a notification gets no reply; if ``handle`` raised, the next request is answered with that
  :class:`~dlpipe._ipc.messages.Failed` instead (it is handled first, then discarded), so no
  failure goes unseen;
* :class:`~dlpipe._ipc.messages.Stop`, or the end of the request pipe (the pipeline closed, or
  its process died), ends the process; so does a reply pipe nobody reads any more.

Replies go to a descriptor of their own: file descriptor 1 is pointed at standard error, so a
library that prints (nvImageCodec's warnings go to standard output) cannot corrupt a reply.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable

from . import wire
from .messages import Failed, Hello, Ready, Stop


def serve(handle: Callable[[object], object], requests: wire.Reader, replies: int) -> None:
    """Hand each message on ``requests`` to ``handle`` until Stop or the end of the pipe."""
    failed: Failed | None = None  # a notification's failure, for the next request
    while True:
        try:
            message, flags = requests.read()
        except EOFError:
            return
        if isinstance(message, Stop):
            return
        try:
            reply = handle(message)
        except Exception as e:
            reply = Failed.of(e)
            if not flags & wire.REPLY:
                failed = failed or reply
                continue
        if flags & wire.REPLY:
            reply, failed = (failed, None) if failed is not None else (reply, None)
            try:
                wire.write(replies, wire.frame(reply))
            except BrokenPipeError:  # the pipeline stopped listening: end quietly
                os._exit(0)


def main() -> None:
    """Start the server that the first message names, and serve it (see the module doc)."""
    requests, replies = wire.Reader(0), os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        hello, _ = requests.read()
        if not isinstance(hello, Hello):  # only HelperProcess starts this script
            return
        sys.path += [p for p in hello.path if p not in sys.path]
        try:
            handle = importlib.import_module(hello.module).handler(**hello.args)
        except Exception as e:
            wire.write(replies, wire.frame(Failed.of(e)))
            return
        wire.write(replies, wire.frame(Ready(os.getpid(), sys.implementation.cache_tag)))
    except (EOFError, BrokenPipeError):  # stopped before it was ready
        return
    serve(handle, requests, replies)
