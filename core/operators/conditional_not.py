"""``_conditional_not``: ``not x`` on a DataNode inside a pipeline with conditionals (DALI's
``_conditional.not_``): per sample, a scalar (any type) becomes the bool ``x == 0``."""

from __future__ import annotations

import numpy as np

from ..graph import Operator, register
from .conditional_validate import check_predicate


@register
class ConditionalNot(Operator):
    """Logical ``not`` of a CPU scalar per sample (eager, not lazy)."""

    schema = "_conditional_not"
    devices = ("cpu",)
    light = True

    def output_layouts(self, input_layouts):
        return [""]

    def run_sample(self, inputs, args, param):
        return np.asarray(~check_predicate(inputs[0], "not", "", False))
