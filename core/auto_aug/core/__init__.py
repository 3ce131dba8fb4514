"""The building blocks of the automatic augmentations (DALI's ``nvidia.dali.auto_aug.core``):
the ``@augmentation`` decorator, ``signed_bin``, ``select`` and ``Policy``."""

from ._augmentation import Augmentation as _Augmentation
from ._augmentation import signed_bin
from ._select import select
from .decorator import augmentation
from .policy import Policy

__all__ = ("signed_bin", "augmentation", "select", "Policy", "_Augmentation")
