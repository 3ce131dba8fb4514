"""``fn.python_function`` and ``fn.dl_tensor_python_function``: a user's Python function as an
operator (DALI's ``PythonFunction`` / ``DLTensorPythonFunction``).

``python_function`` hands the function numpy arrays (CuPy arrays on the GPU, called inside
the pipeline's stream) and takes arrays back; ``dl_tensor_python_function`` hands it DLPack
capsules and takes capsules (or objects with ``__dlpack__``) back. Per sample (the default for
``python_function``), the function gets one array per input and returns one array (a tuple of
``num_outputs`` arrays, or None for ``num_outputs=0``); with ``batch_processing=True`` it gets
one list of samples per input and returns, per output, a list of samples or one array whose
first axis is the batch.

As in DALI, the operator is never pruned (``preserve``), and its calls are serial: on the CPU
the samples of a batch are processed one after another, in order, on the stage thread, so a
stateful function (a counter, its own RNG) sees the same sequence whatever ``num_threads``
is. With conditionals enabled, the function passed as ``function=`` is not rewritten.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register


def check_outputs(outputs, num_outputs: int) -> tuple:
    """The function's return value as a tuple of ``num_outputs`` outputs (DALI's checks).

    Raises:
        TypeError: several outputs expected and not a tuple returned.
        ValueError: a tuple of the wrong length.
    """
    if num_outputs == 0:
        return ()
    if num_outputs > 1:
        if not isinstance(outputs, tuple):
            raise TypeError(
                "The output from a multi-output Python function operator must be a tuple, "
                f"got: {type(outputs)}"
            )
        if len(outputs) != num_outputs:
            raise ValueError(
                "Unexpected number of outputs from Python function operator - got "
                f"{len(outputs)}, expected {num_outputs}"
            )
        return outputs
    if outputs is None:
        raise TypeError("the Python function returned None but num_outputs=1")
    return (outputs,)


class _Capsule:
    """Lets numpy/CuPy take a DLPack capsule the function returned."""

    def __init__(self, capsule, device):
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return self._device


@register(legacy=("PythonFunction",))
class PythonFunction(Operator):
    """Runs a Python function on the data: numpy arrays on the CPU, CuPy arrays on the GPU.

    Args:
        function: the callable (required). It must not modify its inputs.
        num_outputs: how many outputs it returns (default 1; 0: it returns None).
        batch_processing: call it once per batch with lists of samples (default False: once
            per sample).
        output_layouts: a layout for every output (one string), or a list of layouts (the
            first outputs; the rest get none).

    Example:
        >>> def invert(image):
        ...     return 255 - image
        >>> inverted = fn.python_function(images, function=invert)
    """

    schema = "python_function"
    devices = ("cpu", "gpu")
    num_inputs = (0, 256)
    batch_level = True
    _default_batch = False
    _dlpack = False

    def setup(self, *, function=None, num_outputs=1, batch_processing=None,
              output_layouts=None, synchronize_stream=True) -> None:  # fmt: skip
        if not callable(function):
            raise ArgumentError(f"{self.schema}: function={function!r} must be callable")
        if isinstance(num_outputs, bool) or not isinstance(num_outputs, int) or num_outputs < 0:
            raise ArgumentError(f"{self.schema}: num_outputs={num_outputs!r} must be an int >= 0")
        self.function: Callable = function
        self.n_outputs = num_outputs
        self.batch_processing = (
            self._default_batch if batch_processing is None else bool(batch_processing)
        )
        if output_layouts is None:
            layouts = [""] * num_outputs
        elif isinstance(output_layouts, str):
            layouts = [output_layouts] * num_outputs
        else:
            layouts = [str(x) for x in output_layouts][:num_outputs]
            layouts += [""] * (num_outputs - len(layouts))
        self.layouts = layouts
        self.synchronize_stream = synchronize_stream
        self.preserve = True  # DALI: never optimized out of the graph

    def output_devices(self) -> list[str]:
        return ["gpu" if self.device == "gpu" else "cpu"] * self.n_outputs

    def output_layouts(self, input_layouts):
        return list(self.layouts)

    # --- conversions (the DLPack variant overrides them) -----------------------------------
    def _to_user(self, x):
        if self._dlpack:
            if isinstance(x, np.ndarray) and not x.flags.writeable:
                x = x.copy()  # a read-only array has no legacy DLPack export
            return x.__dlpack__()
        return x

    def _from_user(self, x, gpu: bool):
        if self._dlpack and type(x).__name__ == "PyCapsule":
            if gpu:
                import cupy

                return cupy.from_dlpack(_Capsule(x, (2, cupy.cuda.runtime.getDevice())))
            return np.from_dlpack(_Capsule(x, (1, 0)))
        if gpu:
            import cupy

            return cupy.asarray(x)
        if self._dlpack and hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):
            return np.from_dlpack(x)
        return np.asarray(x)

    def _call(self, inputs: list, n: int, gpu: bool) -> list[list]:
        """Per output, the list of its n samples."""
        outs: list[list] = [[] for _ in range(self.n_outputs)]
        if self.batch_processing:
            args = [[self._to_user(x) for x in batch] for batch in inputs]
            res = check_outputs(self.function(*args), self.n_outputs)
            for k, r in enumerate(res):
                if isinstance(r, list | tuple):
                    samples = [self._from_user(x, gpu) for x in r]
                else:
                    dense = self._from_user(r, gpu)
                    samples = [dense[i] for i in range(len(dense))]
                if len(samples) != n:
                    raise ValueError(
                        f"output {k} of the Python function has {len(samples)} samples; the "
                        f"batch has {n}"
                    )
                outs[k] = samples
            return outs
        for i in range(n):
            res = check_outputs(
                self.function(*(self._to_user(batch[i]) for batch in inputs)), self.n_outputs
            )
            for k, r in enumerate(res):
                outs[k].append(self._from_user(r, gpu))
        return outs

    def batch_params(self, n: int):
        return [None] * n  # the batch size, for a function without inputs

    def run_batch_cpu(self, inputs, args, params):
        n = len(params) if params is not None else len(inputs[0])
        return tuple(self._call([list(b) for b in inputs], n, gpu=False))

    def run_batch(self, inputs, args, params, stream):
        """GPU: CuPy arrays in, CuPy arrays out, with the pipeline's stream current."""
        n = len(params) if params is not None else len(inputs[0])
        batches = [[x for x in b] for b in inputs]
        if self._dlpack and self.synchronize_stream and stream is not None:
            stream.synchronize()  # the function may run its own work on any stream
        with stream:
            outs = self._call(batches, n, gpu=True)
        return tuple(outs)


@register(legacy=("DLTensorPythonFunction",))
class DLTensorPythonFunction(PythonFunction):
    """Runs a Python function on DLPack capsules (``dl_tensor_python_function``).

    The arguments are those of ``python_function``, with ``batch_processing`` True by default
    and ``synchronize_stream`` (GPU, default True: the pipeline's work is finished before the
    function is called).

    Example:
        >>> def double(batch):
        ...     return [torch.from_dlpack(x) * 2 for x in batch]
        >>> out = fn.dl_tensor_python_function(data, function=double)
    """

    schema = "dl_tensor_python_function"
    _default_batch = True
    _dlpack = True
