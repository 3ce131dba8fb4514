"""``readers.file`` inputs that are wrong: a list file or ``files=``/``labels=`` entries that
cannot be used (each error names the list file and line, or the entry), and special files (a
FIFO, a device, a directory) that are refused by name instead of hanging the reader."""

from __future__ import annotations

import os
import pathlib

import pytest

from conftest import sample_ids
from dlpipe import ArgumentError, DataNotFoundError, Pipeline, fn
from dlpipe.options import RuntimeOptions


def _reader(pipe_kw=None, **kw):
    pipe_kw = pipe_kw or {"runtime": RuntimeOptions(read_process=False)}
    pipe = Pipeline(batch_size=2, num_threads=1, **pipe_kw)
    with pipe:
        data, labels = fn.readers.file(**kw)
        pipe.set_outputs(data, labels)
    return pipe


def _list(tmp_path, content: bytes) -> str:
    path = tmp_path / "list.txt"
    path.write_bytes(content)
    return str(path)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"a.jpg 0\nb.jpg one\n", r"file_list .*list\.txt:2: expected 'filename label'"),
        (b"a.jpg 0\nb.jpg -1\n", r"list\.txt:2: expected 'filename label' with a non-negative"),
        (b"a.jpg 0\n\nb.jpg 1.5\n", r"list\.txt:3: expected"),
        (b"a.jpg 0\nb.jpg 99999999999\n", r"list\.txt:2: label 99999999999 does not fit int32"),
        (b"a.jpg 0\nb\xe9.jpg 1\n", r"list\.txt:2: not UTF-8 text \(byte 0xe9 at column 2\)"),
        (b"", r"file_list='.*list\.txt' lists no files \(it is empty or blank\)"),
        (b"\n  \n\n", r"lists no files"),
        (b"a.jpg\n", r"list\.txt:1: expected 'filename label'"),
    ],
)
def test_file_list_errors_name_the_list_and_the_line(tmp_path, content, message):
    with pytest.raises(ArgumentError, match=message):
        _reader(file_list=_list(tmp_path, content), file_root=str(tmp_path))


def test_file_list_with_a_file_root_names_the_list_not_the_root(tmp_path):
    with pytest.raises(ArgumentError, match="file_list=") as info:
        _reader(file_list=_list(tmp_path, b""), file_root="/somewhere/else")
    assert "/somewhere/else" not in str(info.value)


def test_file_list_that_is_not_a_file(tmp_path):
    with pytest.raises(DataNotFoundError, match="does not exist"):
        _reader(file_list=str(tmp_path / "missing.txt"))
    with pytest.raises(DataNotFoundError, match="is a directory, not a file"):
        _reader(file_list=str(tmp_path))
    fifo = tmp_path / "list.fifo"
    os.mkfifo(fifo)
    with pytest.raises(DataNotFoundError, match="is a FIFO, not a file"):  # no hang
        _reader(file_list=str(fifo))


def test_good_file_list_with_spaces_and_large_labels(tmp_path):
    (tmp_path / "a b.jpg").write_bytes(b"\x00\x00\x00\x00")
    (tmp_path / "c.jpg").write_bytes(b"\x01\x00\x00\x00")
    path = _list(tmp_path, b"a b.jpg 7\n\nc.jpg   2147483647\n")
    (data, labels) = _reader(file_list=path).run()
    assert sample_ids(data) == [0, 1]
    assert [int(labels.at(i)[0]) for i in range(2)] == [7, 2**31 - 1]


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(files=["a.jpg", 3]), r"files\[1\]=3 is a int; give paths"),
        (dict(files=["a.jpg", ""]), r"files\[1\]='' is not a file name"),
        (dict(files=["a.jpg", "b.jpg"], labels=[0, 1.5]), r"labels\[1\]=1\.5 \(for 'b\.jpg'\)"),
        (dict(files=["a.jpg", "b.jpg"], labels=[0, -1]), r"labels\[1\]=-1 .*\[0, 2147483647\]"),
        (dict(files=["a.jpg", "b.jpg"], labels=[0, 2**31]), r"labels\[1\]=2147483648"),
        (dict(files=["a.jpg"], labels=[0, 1]), r"labels has 2 entries but files has 1"),
    ],
)
def test_files_and_labels_errors_name_the_entry(kw, message):
    with pytest.raises(ArgumentError, match=message):
        _reader(**kw)


def test_files_accepts_path_objects(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"\x05\x00\x00\x00")
    (data, _) = _reader(files=[pathlib.Path(tmp_path / "a.jpg")] * 2).run()
    assert sample_ids(data) == [5, 5]


@pytest.mark.parametrize("read_process", [False, True])
@pytest.mark.parametrize("special", ["fifo", "directory", "device"])
def test_special_files_in_files_are_refused_by_name_not_hung(tmp_path, special, read_process):
    good = tmp_path / "a.jpg"
    good.write_bytes(b"\x00\x00\x00\x00")
    if special == "fifo":
        bad = tmp_path / "b.jpg"
        os.mkfifo(bad)
    elif special == "directory":
        bad = tmp_path / "b.jpg"
        bad.mkdir()
    else:
        bad = pathlib.Path("/dev/zero")
    pipe = _reader(
        pipe_kw={"runtime": RuntimeOptions(read_process=read_process)},
        files=[str(good), str(bad)],
    )
    with pytest.raises(DataNotFoundError, match=rf"cannot read '{bad}'.*not a (regular )?file"):
        pipe.run()
    pipe.close()


def test_special_files_in_file_root_are_refused_at_build(tmp_path):
    (tmp_path / "c0").mkdir()
    (tmp_path / "c0" / "a.jpg").write_bytes(b"\x00\x00\x00\x00")
    os.mkfifo(tmp_path / "c0" / "b.jpg")
    with pytest.raises(ArgumentError, match=r"c0/b\.jpg' in file_root is a FIFO, not a file"):
        _reader(file_root=str(tmp_path))


def test_directories_in_file_root_are_passed_over_as_in_dali(tmp_path):
    (tmp_path / "c0" / "sub.jpg").mkdir(parents=True)
    (tmp_path / "c0" / "a.jpg").write_bytes(b"\x03\x00\x00\x00")
    (tmp_path / "c0" / "fifo.txt").write_bytes(b"")  # filtered out by extension
    (data, _) = _reader(file_root=str(tmp_path)).run()
    assert sample_ids(data) == [3, 3]
