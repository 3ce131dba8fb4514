"""``fn.io.file.read``: encoded paths in (1-D uint8/int8), file bytes out."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, DataNotFoundError, Pipeline, fn, ops, types
from dlpipe.options import RuntimeOptions
from dlpipe.readers import _read_process


@pytest.fixture
def files(tmp_path):
    """Files of random sizes (one empty, one with a space and non-ASCII name)."""
    rng = np.random.default_rng(0)
    out = {}
    for k, size in enumerate([0, 1, 17, 4096, 70001]):
        name = f"f {k}é.bin" if k == 2 else f"f{k}.bin"
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        (tmp_path / name).write_bytes(data)
        out[str(tmp_path / name)] = data
    return out


def encode(path: str, dtype=np.uint8, pad: int = 0) -> np.ndarray:
    return np.frombuffer(path.encode("utf-8") + b"\0" * pad, dtype=dtype)


def read_pipe(samples, read_process=True, **kw):
    runtime = RuntimeOptions(read_process=read_process)
    pipe = Pipeline(batch_size=len(samples), num_threads=2, device_id=None, runtime=runtime)
    with pipe:
        paths = fn.external_source(
            lambda: samples, dtype=types.UINT8 if samples[0].dtype == np.uint8 else types.INT8
        )
        pipe.set_outputs(fn.io.file.read(paths, **kw))
    return pipe


def reads_of(pipe) -> _read_process.BatchReads:
    (node,) = [n for n in pipe._ops if n.op.schema == "io.file.read"]
    return node.op._reads


# read processes: a batch's files in one request, as readers.file reads them; or in this process
READ_PROCESS = [
    pytest.param(True, marks=pytest.mark.skipif(not _read_process.available(), reason="Linux")),
    False,
]


@pytest.mark.parametrize("read_process", READ_PROCESS)
@pytest.mark.parametrize("dont_use_mmap", [False, True])
def test_reads_every_file_exactly(files, dont_use_mmap, read_process):
    names = list(files)
    pipe = read_pipe([encode(p) for p in names], read_process, dont_use_mmap=dont_use_mmap)
    for _ in range(2):  # the second batch reuses the read processes' memory
        (out,) = pipe.run()
        assert len(out) == len(names)
        for i, p in enumerate(names):
            got = out.at(i)
            assert got.dtype == np.uint8 and got.shape == (len(files[p]),)
            assert got.tobytes() == files[p]
        assert out.layout() == ""
    assert (reads_of(pipe).process is not None) == read_process
    pipe.close()
    assert reads_of(pipe).process is None


def test_int8_input_and_nul_padded_paths(files):
    names = list(files)
    width = max(len(p.encode()) for p in names) + 3
    samples = [encode(p, np.int8, width - len(p.encode())) for p in names]
    assert len({s.size for s in samples}) == 1  # one dense batch of padded paths
    (out,) = read_pipe(samples).run()
    assert [out.at(i).tobytes() for i in range(len(names))] == list(files.values())


def test_legacy_ops_class(files):
    names = list(files)[1:3]
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    reader = ops.io.file.Read(dont_use_mmap=True)
    with pipe:
        paths = fn.external_source(lambda: [encode(p) for p in names])
        pipe.set_outputs(reader(paths))
    (out,) = pipe.run()
    assert [out.at(i).tobytes() for i in range(2)] == [files[p] for p in names]


@pytest.mark.parametrize("read_process", READ_PROCESS)
def test_missing_file_names_the_path(files, tmp_path, read_process):
    missing = str(tmp_path / "no such file.bin")
    pipe = read_pipe([encode(list(files)[1]), encode(missing)], read_process)
    with pytest.raises(DataNotFoundError, match=r"io\.file\.read.*no such file\.bin.*sample 1"):
        pipe.run()


@pytest.mark.parametrize("read_process", READ_PROCESS)
def test_a_directory_names_the_path(tmp_path, read_process):
    pipe = read_pipe([encode(str(tmp_path))], read_process)
    with pytest.raises(DataNotFoundError, match=rf"io\.file\.read.*{tmp_path.name}"):
        pipe.run()


def test_input_type_and_shape_errors(files):
    name = list(files)[1]
    wide = np.frombuffer(name.encode(), np.uint8).astype(np.int32)
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(fn.io.file.read(fn.external_source(lambda: [wide])))
    with pytest.raises(ArgumentError, match="uint8 or int8"):
        pipe.run()
    square = np.zeros((2, 2), np.uint8)
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(fn.io.file.read(fn.external_source(lambda: [square])))
    with pytest.raises(ArgumentError, match=r"1-D.*\(2, 2\)"):
        pipe.run()


def test_argument_errors():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe, pytest.raises(ArgumentError, match="use_o_direct=True needs dont_use_mmap"):
        fn.io.file.read(fn.external_source(lambda: [encode("x")]), use_o_direct=True)
    with pipe, pytest.raises(ArgumentError, match="takes 1..1 inputs"):
        fn.io.file.read()
