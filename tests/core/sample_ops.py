"""Operators for the sample-process tests, in a module of their own: a sample process unpickles
them by importing it (the test module itself imports what a sample process has no use for)."""


class Half:
    """run_sample halves its input; skips sample values of -1, fails on -2."""

    def run_sample(self, inputs, args, param):
        from dlpipe.errors import SampleSkipped

        (x,) = inputs
        if isinstance(x, float) and x == -1:
            raise SampleSkipped("a bad one")
        if isinstance(x, float) and x == -2:
            raise ValueError("worse")
        return x / 2 + (param or 0)


class EnvValue:
    """run_sample returns the sample process's value of the environment variable it is given
    (as bytes in a uint8 array)."""

    def run_sample(self, inputs, args, param):
        import os

        import numpy as np

        (name,) = inputs
        return np.frombuffer(os.environ.get(str(name), "").encode(), np.uint8).copy()


class Reverse:
    """run_sample returns its input's bytes reversed, and whether the input lay in memory that
    the sample process mapped (a read process's slot) rather than an array of its own."""

    def run_sample(self, inputs, args, param):
        import mmap

        import numpy as np

        (x,) = inputs
        base = x
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        base = base.obj if isinstance(base, memoryview) else base
        return x[::-1].copy(), np.array(isinstance(base, mmap.mmap))
