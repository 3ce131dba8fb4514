"""``_malloc.tune_malloc``: glibc's thresholds raised once per process, when a pipeline's
options want it and the user did not tune glibc himself."""

from __future__ import annotations

import sys

import pytest

from dlpipe import _malloc


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(_malloc, "_state", None)  # as in a new process


class _Libc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return 1


@pytest.fixture
def libc(monkeypatch):
    fake = _Libc()
    monkeypatch.setattr(_malloc.ctypes, "CDLL", lambda name: fake)
    monkeypatch.setattr(sys, "platform", "linux")
    return fake


def test_applied_once_when_the_options_want_it(fresh, libc):
    assert _malloc.tune_malloc(True, environ={}) is True
    assert libc.calls == [(-3, 32 << 20), (-1, 512 << 20)]  # M_MMAP_, M_TRIM_THRESHOLD
    assert _malloc.tune_malloc(True, environ={}) is True
    assert len(libc.calls) == 2  # process-wide: once


def test_a_pipeline_without_it_applies_nothing_and_a_later_one_still_may(fresh, libc):
    assert _malloc.tune_malloc(False, environ={}) is False and libc.calls == []
    assert _malloc.tune_malloc(True, environ={}) is True and len(libc.calls) == 2


@pytest.mark.parametrize("var", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_glibc_tuned_by_the_user_is_left_alone(fresh, libc, var):
    assert _malloc.tune_malloc(True, environ={var: "1000"}) is False and libc.calls == []


def test_the_option_comes_from_the_pipeline(fresh, libc):
    from dlpipe import Pipeline, fn
    from dlpipe.options import RuntimeOptions

    for tuning, calls in ((False, 0), (True, 2)):
        opts = RuntimeOptions(malloc_tuning=tuning, read_process=False)
        pipe = Pipeline(batch_size=2, num_threads=2, device_id=None, runtime=opts)
        with pipe:
            pipe.set_outputs(fn.random.uniform(shape=[2]))
        pipe.build()
        assert len(libc.calls) == calls
        pipe.close()
