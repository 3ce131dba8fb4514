"""RuntimeOptions (core/options.py): one object per pipeline, read from the environment once."""

from __future__ import annotations

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
    assert off._readers["Reader"]._process is None
    assert (on._readers["Reader"]._process is not None) == RuntimeOptions().read_process
    off.close(), on.close()


def test_runtime_must_be_options():
    from dlpipe import Pipeline

    with pytest.raises(TypeError, match="RuntimeOptions"):
        Pipeline(batch_size=1, num_threads=1, runtime={"read_process": False})


def test_lanes_from_the_environment():
    assert RuntimeOptions.from_env({"DLPIPE_LANES": "2"}).lanes == 2
    with pytest.raises(ValueError, match="DLPIPE_LANES"):
        RuntimeOptions.from_env({"DLPIPE_LANES": "many"})
