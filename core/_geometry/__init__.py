"""Pure arithmetic shared by operators, decoders and kernels: DALI's random crop window
(``crop_window``) and resize sizes and filters (``resize_params``).

It sits below all three, so a kernel or a decoder needs no operator module to get it (no
imports upward: ``tests/core/test_layering.py``). It imports only numpy, ``errors`` and
``types``.
"""
