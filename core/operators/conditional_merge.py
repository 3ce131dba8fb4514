"""``_conditional_merge``: after an ``if`` on a DataNode, each sample of a variable comes from
the branch its predicate chose (DALI's ``_conditional.merge``).

With masked execution (``_conditionals.py``) a branch's nodes hold values only for the samples
that took the branch; the merge picks, per sample, the true branch's value where the predicate
holds and the false branch's elsewhere. On the GPU it is a new list of pointers into both
branches' outputs, no copy. Both branches must give the variable one type and one number of
dimensions.
"""

from __future__ import annotations

import numpy as np

from .._conditionals import predicate_mask
from .._gpu_branches import merge_gpu
from ..graph import Operator, register


def _describe(values) -> tuple | None:
    """(dtype, ndim) of the samples present, or None when there are none."""
    for v in values:
        if v is not None:
            a = np.asarray(v)
            return a.dtype, a.ndim
    return None


@register
class ConditionalMerge(Operator):
    """Merges the two branches of an ``if`` per sample.

    Args:
        predicate: (argument input) the ``if``'s validated predicate, one bool per sample.
        variable: the name of the merged variable, for error messages.
    """

    schema = "_conditional_merge"
    devices = ("cpu", "gpu")
    num_inputs = (2, 2)
    arg_inputs = frozenset({"predicate"})
    batch_level = True
    reads_child_scopes = True  # its inputs come from the two branch scopes under its own

    def setup(self, *, predicate=None, variable="") -> None:
        self.variable = variable

    def output_layouts(self, input_layouts):
        return [input_layouts[0] or input_layouts[1]]

    def _check(self, t, f) -> None:
        if t is None or f is None or t == f:
            return
        what = f"variable {self.variable!r}" if self.variable else "a variable"
        raise TypeError(
            f"Divergent data found in different branches of `if/else` control flow statement: "
            f"{what} is {t[0]} with {t[1]} dimension(s) in the `if` branch and {f[0]} with "
            f"{f[1]} dimension(s) in the `else` branch. Both branches must produce the same type "
            "and number of dimensions."
        )

    def run_batch_cpu(self, inputs, args, params):
        t, f = inputs
        pred = args["predicate"]
        self._check(_describe(t), _describe(f))
        return ([t[i] if pred[i] else f[i] for i in range(len(pred))],)

    def run_batch(self, inputs, args, params, stream):
        """GPU: per sample, the pointer, shape and strides of the chosen branch's value. The
        GPU stage gives ``t`` for the samples whose predicate holds and ``f`` for the others
        (``_gpu_branches.py``); they are interleaved."""
        t, f = inputs
        pred = args["predicate"]
        if not (isinstance(pred, np.ndarray) and pred.dtype == np.bool_ and pred.ndim == 1):
            pred = predicate_mask(pred, len(pred))  # (the GPU stage gives a bool array: read)
        desc = [(x.dtype, x.shapes.shape[1]) if hasattr(x, "ptrs") else None for x in (t, f)]
        self._check(*desc)
        return merge_gpu(t, f, pred)
