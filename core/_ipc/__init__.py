"""The runtime layer's helper processes and recycled memory, in one place.

* ``process``: :class:`~dlpipe._ipc.process.HelperProcess`, the pipeline's side of a helper
  process (how one is started, spoken to and stopped), and which Python runs it.
* ``boot`` and ``server``: the helper's side: the script every helper runs, and the one serve
  loop that hands each message to the helper's ``handle`` function.
* ``wire`` and ``messages``: how messages travel (length-prefixed pickles on pipes) and the
  messages every helper speaks (the ready handshake, failures, stop).
* ``regions``: memory one process shares so that another maps it (a read process's slots,
  decoded from in place by a decode process).
* ``slots``: :class:`~dlpipe._ipc.slots.SlotPool`, every recycled buffer (read slots, device
  slots, nvImageCodec's spare images, NVDEC sessions): memory goes back to its free list when
  the last view of it is gone, and is handed out again after the event that came with it.

This package sits below the operators (``tests/core/test_layering.py``): it imports the
standard library, numpy (``regions``) and ``errors``, nothing else of dlpipe. ``boot``,
``server``, ``wire`` and ``messages`` import only the standard library, so a helper that needs
nothing more (the read server) starts in about 20 ms.
"""
