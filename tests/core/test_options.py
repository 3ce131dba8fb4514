"""RuntimeOptions (core/options.py): one object per pipeline, read from the environment once."""

from __future__ import annotations

import sys

import pytest

from conftest import file_reader_pipe
from dlpipe.options import RuntimeOptions


def test_from_env_reads_the_switches():
    assert RuntimeOptions.from_env({}) == RuntimeOptions()
    off = RuntimeOptions.from_env({"DLPIPE_READ_PROCESS": "0", "DLPIPE_DECODE_PROCESS": "0"})
    assert not off.read_process and not off.decode_process and off.malloc_tuning


@pytest.mark.parametrize(
    "field, value", [("read_processes", 0), ("lanes", -1), ("decoded_spare", 1.5), ("lanes", True)]
)
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        RuntimeOptions(**{field: value})


def test_each_pipeline_keeps_its_own_options(image_root, monkeypatch):
    """The environment is read when a pipeline is made, not when it is built or run; a
    pipeline given options ignores it."""
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")
    off = file_reader_pipe(2, file_root=image_root)
    monkeypatch.delenv("DLPIPE_READ_PROCESS")
    assert not off.runtime.read_process
    on = file_reader_pipe(
        2, file_root=image_root, pipe_kw={"runtime": RuntimeOptions(read_process=True)}
    )
    off.run(), on.run()
    assert off._readers["Reader"]._reads.process is None
    assert (on._readers["Reader"]._reads.process is not None) == RuntimeOptions().read_process
    off.close(), on.close()


def test_runtime_must_be_options():
    from dlpipe import Pipeline

    with pytest.raises(TypeError, match="RuntimeOptions"):
        Pipeline(batch_size=1, num_threads=1, runtime={"read_process": False})


def test_lanes_from_the_environment():
    assert RuntimeOptions.from_env({"DLPIPE_LANES": "2"}).lanes == 2
    with pytest.raises(ValueError, match="DLPIPE_LANES"):
        RuntimeOptions.from_env({"DLPIPE_LANES": "many"})


def test_gil_switch_interval_option_and_env():
    assert RuntimeOptions().gil_switch_interval is None
    env = {"DLPIPE_GIL_SWITCH_INTERVAL": "0.002"}
    assert RuntimeOptions.from_env(env).gil_switch_interval == 0.002
    assert RuntimeOptions.from_env({"DLPIPE_GIL_SWITCH_INTERVAL": ""}).gil_switch_interval is None
    with pytest.raises(ValueError, match="DLPIPE_GIL_SWITCH_INTERVAL='fast' must be seconds"):
        RuntimeOptions.from_env({"DLPIPE_GIL_SWITCH_INTERVAL": "fast"})
    for bad in (0, -1.0, True, "0.001"):
        with pytest.raises(ValueError, match="gil_switch_interval=.* must be None or seconds"):
            RuntimeOptions(gil_switch_interval=bad)


def test_set_switch_interval_only_over_pythons_default(monkeypatch):
    from dlpipe.options import PYTHON_SWITCH_INTERVAL, set_switch_interval

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(PYTHON_SWITCH_INTERVAL)
        assert not set_switch_interval(None)
        assert sys.getswitchinterval() == pytest.approx(PYTHON_SWITCH_INTERVAL)
        assert set_switch_interval(0.0005)
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        # a later pipeline (or the user) does not override a value already chosen
        assert not set_switch_interval(0.002)
        assert sys.getswitchinterval() == pytest.approx(0.0005)
        sys.setswitchinterval(0.01)  # the user's own
        assert not set_switch_interval(0.0005)
        assert sys.getswitchinterval() == pytest.approx(0.01)
    finally:
        sys.setswitchinterval(before)


def test_decode_lanes_by_default_follow_the_decoders_threads():
    from dlpipe.pipeline import default_lanes

    assert default_lanes(True, 16) == 3  # three lanes of 5 CPU threads each
    assert default_lanes(True, 9) == 3
    assert default_lanes(True, 8) == 2  # three would leave each decoder 2 threads
    assert default_lanes(False, 16) == 2  # decoding in the pipeline's process
