"""Experimental PyTorch integrations (DALI's ``nvidia.dali.plugin.pytorch.experimental``):
:mod:`~dlpipe.plugins.pytorch.experimental.proxy`, a dlpipe pipeline behind a torch
``DataLoader``'s workers."""
