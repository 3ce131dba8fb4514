"""``fn.readers.file``: the three ways of listing files, labels, outputs and errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import batch_values, file_reader_pipe, sample_ids
from dlpipe import ArgumentError, DataNotFoundError, Pipeline, PipelineError, fn, ops


def run_reader(batch_size=4, **args):
    pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=0, seed=1)
    with pipe:
        data, label = fn.readers.file(name="Reader", **args)
        pipe.set_outputs(data, label)
    return pipe, pipe.run()


def write(path, payload=b"x"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(payload)


def test_file_root_sorted_classes_and_labels(tmp_path):
    for cls, names in {
        "b_dogs": ["2.jpg", "1.JPG"],
        "a_cats": ["z.png", "a.jpeg", "notes.txt"],
        "c_empty": [],
    }.items():
        os.makedirs(tmp_path / cls, exist_ok=True)
        for n in names:
            write(str(tmp_path / cls / n), n.encode())
    write(str(tmp_path / "top_level.jpg"))  # files directly in file_root are ignored
    pipe, (data, labels) = run_reader(batch_size=4, file_root=str(tmp_path))
    assert [bytes(data.at(i)).decode() for i in range(4)] == ["a.jpeg", "z.png", "1.JPG", "2.jpg"]
    assert labels.as_array().tolist() == [[0], [0], [1], [1]]
    assert [data.source_info(i) for i in range(2)] == ["a_cats/a.jpeg", "a_cats/z.png"]
    assert pipe.epoch_size("Reader") == 4


def test_outputs_are_uint8_bytes_and_int32_labels(make_files):
    root, _ = make_files(4, classes=2)
    _, (data, labels) = run_reader(file_root=root)
    assert data.at(0).dtype == np.uint8 and data.at(0).shape == (4,)
    assert labels.at(0).dtype == np.int32 and labels.at(0).shape == (1,)


def test_file_filters_dir_filters_and_case(tmp_path):
    for name in ["a/x.jpg", "a/y.PNG", "a/z.txt", "b/w.jpg", "skip/q.jpg"]:
        write(str(tmp_path / name), name.encode())
    pipe, (data, _) = run_reader(batch_size=1, file_root=str(tmp_path), file_filters=["*.png"])
    assert bytes(data.at(0)).decode() == "a/y.PNG" and pipe.epoch_size("Reader") == 1
    with pytest.raises(DataNotFoundError, match="No files found"):
        run_reader(file_root=str(tmp_path), file_filters="*.png", case_sensitive_filter=True)
    pipe, (data, labels) = run_reader(batch_size=2, file_root=str(tmp_path), dir_filters=["a", "b"])
    assert pipe.epoch_size("Reader") == 3  # x.jpg, y.PNG, w.jpg; z.txt is no known extension
    assert [bytes(data.at(i)).decode() for i in range(2)] == ["a/x.jpg", "a/y.PNG"]


def test_file_list_parsed_from_the_right(tmp_path):
    write(str(tmp_path / "imgs" / "my cat.jpg"), b"cat")
    write(str(tmp_path / "imgs" / "dog.jpg"), b"dog")
    lst = tmp_path / "list.txt"
    lst.write_text("imgs/my cat.jpg 3\n\n  imgs/dog.jpg\t12  \n")
    _, (data, labels) = run_reader(batch_size=2, file_list=str(lst))
    assert [bytes(data.at(i)) for i in range(2)] == [b"cat", b"dog"]
    assert labels.as_array().ravel().tolist() == [3, 12]
    # relative to file_root when given
    lst2 = tmp_path / "elsewhere.txt"
    lst2.write_text("dog.jpg 1\n")
    _, (data, _) = run_reader(batch_size=1, file_list=str(lst2), file_root=str(tmp_path / "imgs"))
    assert bytes(data.at(0)) == b"dog"


def test_file_list_malformed_line_names_file_and_line(tmp_path):
    lst = tmp_path / "bad.txt"
    lst.write_text("a.jpg 1\nb.jpg -2\n")
    with pytest.raises(ArgumentError, match=r"bad.txt:2"):
        run_reader(file_list=str(lst))


def test_files_and_labels(tmp_path):
    for n in "abc":
        write(str(tmp_path / f"{n}.jpg"), n.encode())
    _, (data, labels) = run_reader(
        batch_size=3, file_root=str(tmp_path), files=["c.jpg", "a.jpg", "b.jpg"], labels=[7, 8, 9]
    )
    assert [bytes(data.at(i)) for i in range(3)] == [b"c", b"a", b"b"]
    assert labels.as_array().ravel().tolist() == [7, 8, 9]
    # without labels, a file's label is its index; absolute paths stay as they are
    _, (data, labels) = run_reader(
        batch_size=2, files=[str(tmp_path / "b.jpg"), str(tmp_path / "a.jpg")]
    )
    assert labels.as_array().ravel().tolist() == [0, 1]


@pytest.mark.parametrize(
    "args, error, message",
    [
        (dict(files=["a"], file_list="l.txt"), ArgumentError, "not both"),
        (dict(file_root="/tmp", labels=[1]), ArgumentError, "labels= needs files="),
        (dict(files=[]), ArgumentError, "files= is empty"),
        (dict(files=["a", "b"], labels=[1]), ArgumentError, "labels has 1 entries but files has 2"),
        (dict(), ArgumentError, "file_root=, file_list= or files="),
        (dict(file_root="/no/such/dir"), DataNotFoundError, "/no/such/dir"),
        (dict(file_list="/no/such/list.txt"), DataNotFoundError, "/no/such/list.txt"),
    ],
)
def test_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        run_reader(**args)


def test_empty_folder_is_an_error(tmp_path):
    os.makedirs(tmp_path / "cls")
    with pytest.raises(DataNotFoundError, match="No files found"):
        run_reader(file_root=str(tmp_path))


def test_a_file_removed_after_listing_is_named(make_files):
    root, names = make_files(4)
    pipe = Pipeline(batch_size=4, num_threads=2, seed=1)
    with pipe:
        data, _ = fn.readers.file(file_root=root)
        pipe.set_outputs(data)
    pipe.build()
    os.remove(os.path.join(root, names[2]))
    with pytest.raises(DataNotFoundError, match=names[2]):
        pipe.run()
    with pytest.raises(PipelineError, match="no longer valid"):
        pipe.run()


def test_legacy_ops_file_reader(make_files):
    root, _ = make_files(6)

    class LegacyPipe(Pipeline):
        def __init__(self):
            super().__init__(batch_size=3, num_threads=1, device_id=0, seed=3)
            self.input = ops.FileReader(file_root=root, shard_id=1, num_shards=2, name="Reader")

        def define_graph(self):
            data, label = self.input()
            return data, label

    pipe = LegacyPipe()
    data, labels = pipe.run()
    assert sample_ids(data) == [3, 4, 5]
    assert pipe.reader_meta("Reader")["shard_id"] == 1
    assert ops.readers.File is ops.FileReader


def test_reads_ahead_and_yields_what_a_synchronous_pipeline_does(image_root):
    """The executor draws the next iteration early and the reader starts its read then
    (``prefetch``); the batches are those of a pipeline that reads nothing ahead."""
    kw = {"file_root": image_root, "random_shuffle": True, "initial_fill": 8}
    ahead = file_reader_pipe(5, **kw)
    plain = file_reader_pipe(5, pipe_kw={"exec_async": False, "exec_pipelined": False}, **kw)
    got, want = [], []
    for _ in range(9):
        got.append(batch_values(ahead.run()))
        want.append(batch_values(plain.run()))
    assert got == want
    reader = ahead._readers["Reader"]
    assert reader._reader is not None and reader._ahead  # a read is under way
    assert plain._readers["Reader"]._reader is None
    ahead.close()
    assert reader._reader is None and not reader._ahead
    plain.close()
