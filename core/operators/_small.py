"""Batch-wise runs of operators over small host data (``Operator.small_output_in``).

Automatic augmentation draws a few random numbers per sample and turns them into predicates
and parameters with constants, subscripts and arithmetic: hundreds of graph nodes whose
samples hold one to a few dozen numbers. Run per sample, each node costs a Python call chain
per sample (a yappi profile of DALI's EfficientNet example counted ~9,500 such calls per batch of
128, 0.2x DALI's speed: BENCHMARKS.md, "Automatic augmentation: the host bookkeeping"). Run
batch-wise, a node is one numpy call over the stacked samples.

The rule: an operator whose inputs are all small (``graph.small_host_inputs``) runs through
``run_batch_cpu``, which stacks the samples (:func:`stack`) and computes the batch at once; a
batch whose samples differ in shape or dtype, or one the vectorised path refuses, goes through
the operator's ``run_sample`` per sample instead (:func:`per_sample`), so values and errors are
those of the per-sample path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def stack(samples: Sequence) -> np.ndarray | None:
    """The samples as one ``(n, *shape)`` array, or None when they differ in shape or dtype
    (or there are none). A batch handed on as one array (``graph.Rows``, ``graph.Batch``,
    or the array itself: the executor's array-only values) is reused."""
    if type(samples) is np.ndarray:
        return samples
    whole = getattr(samples, "array", None)
    if isinstance(whole, np.ndarray) and len(whole) == len(samples):
        return whole
    if not len(samples):
        return None
    first = np.asarray(samples[0])
    shape, dtype = first.shape, first.dtype
    arrays = [first]
    for s in samples[1:]:
        a = np.asarray(s)
        if a.shape != shape or a.dtype != dtype:
            return None
        arrays.append(a)
    if (
        dtype.kind in "biufc" and dtype.isnative
    ):  # np.stack's result, in one C call (a fifth of its cost here)
        return np.array(arrays, dtype=dtype)
    return np.stack(arrays)


def per_sample(run: Callable, inputs: Sequence, args: dict, params, n: int) -> list:
    """``run(inputs_i, args_i, param_i)`` for each sample (the per-sample path, on the
    calling thread), as lists of outputs; an error names its sample (``sample_index``)."""
    outs = []
    for i in range(n):
        try:
            out = run(
                tuple(x[i] for x in inputs),
                {k: v[i] for k, v in args.items()},
                params[i] if params is not None else None,
            )
        except Exception as e:
            e.sample_index = i
            raise
        outs.append(out)
    return outs
