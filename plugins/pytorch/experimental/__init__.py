"""Experimental PyTorch integrations (DALI's ``nvidia.dali.plugin.pytorch.experimental``):
:mod:`~dlpipe.plugins.pytorch.experimental.proxy`, a dlpipe pipeline behind a torch
``DataLoader``'s workers.

As in DALI 2.4, ``proxy`` is an attribute of this package (and this package one of
``dlpipe.plugins.pytorch``) without importing it by name; it is imported when first used."""


def __getattr__(name: str):
    if name == "proxy":
        import importlib

        return importlib.import_module(f"{__name__}.proxy")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
