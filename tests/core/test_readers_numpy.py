"""``fn.readers.numpy`` on ``.npy`` files written with ``np.save`` (C and Fortran order)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from conftest import check_checkpoint_resumes, file_reader_ids
from dlpipe import ArgumentError, DataNotFoundError, DecodeError, Pipeline, fn, ops


def np_pipe(batch_size=1, seed=3, num_threads=2, **kw):
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=None, seed=seed)
    with pipe:
        pipe.set_outputs(fn.readers.numpy(name="Reader", **kw))
    return pipe


def run_arrays(pipe, batches=1):
    out = []
    for _ in range(batches):
        (tl,) = pipe.run()
        out += [tl.at(i) for i in range(len(tl))]
    return out


@pytest.fixture
def arrays(tmp_path):
    """Files in the root and in two subdirectories, C and Fortran order, several dtypes."""
    rng = np.random.default_rng(0)
    made = {
        "a.npy": np.arange(12, dtype=np.int16).reshape(3, 4),
        "b.npy": np.asfortranarray(rng.standard_normal((5, 7)).astype(np.float32)),
        "sub1/c.npy": np.asfortranarray(rng.integers(0, 255, (2, 3, 4), dtype=np.uint8)),
        "sub2/e.npy": rng.standard_normal(6),
        "sub2/big.npy": np.arange(24, dtype=">i4").reshape(2, 3, 4),  # big-endian
    }
    for name, arr in made.items():
        os.makedirs(tmp_path / os.path.dirname(name), exist_ok=True)
        np.save(tmp_path / name, arr)
    (tmp_path / "sub1" / "d.txt").write_text("not an array")
    (tmp_path / "sub1" / "x.NPY").write_bytes(b"filtered out: case-sensitive filter")
    return str(tmp_path), made


ORDER = ["a.npy", "b.npy", "sub1/c.npy", "sub2/big.npy", "sub2/e.npy"]


@pytest.mark.parametrize("dont_use_mmap", [False, True])
def test_values_order_and_layout(arrays, dont_use_mmap):
    root, made = arrays
    pipe = np_pipe(file_root=root, dont_use_mmap=dont_use_mmap)
    for name in ORDER:
        (tl,) = pipe.run()
        assert tl.source_info(0) == name
        got, ref = tl.at(0), np.load(os.path.join(root, name))
        assert got.shape == ref.shape and got.dtype == ref.dtype.newbyteorder("=")
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, ref)
    assert pipe.reader_meta("Reader")["epoch_size"] == 5


def test_fortran_order_is_transposed_to_c(arrays):
    root, made = arrays
    (out,) = run_arrays(np_pipe(files=["sub1/c.npy"], file_root=root))
    with open(os.path.join(root, "sub1/c.npy"), "rb") as f:
        assert b"'fortran_order': True" in f.read(128)
    np.testing.assert_array_equal(out, made["sub1/c.npy"])
    assert out.flags.c_contiguous and out.shape == (2, 3, 4)


def test_files_and_file_list(arrays, tmp_path):
    root, made = arrays
    files = [os.path.join(root, "sub2/e.npy"), os.path.join(root, "a.npy")]
    got = run_arrays(np_pipe(files=files), 2)
    np.testing.assert_array_equal(got[0], made["sub2/e.npy"])
    np.testing.assert_array_equal(got[1], made["a.npy"])
    listing = os.path.join(root, "list.txt")
    with open(listing, "w") as f:
        f.write("sub1/c.npy\n\nb.npy  \n")
    got = run_arrays(np_pipe(file_list=listing), 2)
    np.testing.assert_array_equal(got[0], made["sub1/c.npy"])
    np.testing.assert_array_equal(got[1], made["b.npy"])
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(ops.NumpyReader(file_root=root, file_filter="e.*")())
    np.testing.assert_array_equal(run_arrays(pipe)[0], made["sub2/e.npy"])


# --- ROI --------------------------------------------------------------------------------------


@pytest.fixture
def grid(tmp_path):
    arr = np.arange(5 * 6, dtype=np.int32).reshape(5, 6)
    np.save(tmp_path / "c.npy", arr)
    np.save(tmp_path / "f.npy", np.asfortranarray(arr))
    return str(tmp_path), arr


@pytest.mark.parametrize("name", ["c.npy", "f.npy"])
@pytest.mark.parametrize("dont_use_mmap", [False, True])
@pytest.mark.parametrize(
    "roi, want",
    [
        (dict(roi_start=[1, 2], roi_end=[4, 5]), (slice(1, 4), slice(2, 5))),
        (dict(roi_start=[1, 2], roi_shape=[2, 3]), (slice(1, 3), slice(2, 5))),
        # 0.5 * 5 = 2.5 rounds away from zero to 3; (0.5 + 0.3) * 5 = 4.0
        (dict(rel_roi_start=[0.5, 0.0], rel_roi_shape=[0.3, 0.5]), (slice(3, 4), slice(0, 3))),
        (dict(rel_roi_end=[0.4, 1.0]), (slice(0, 2), slice(0, 6))),
        (dict(roi_start=[2], roi_axes=[1]), (slice(0, 5), slice(2, 6))),
        (dict(roi_end=[3], roi_axes=[-2]), (slice(0, 3), slice(0, 6))),
        (dict(rel_roi_start=[0.2, 0.5], roi_axes=[1, 0]), (slice(3, 5), slice(1, 6))),
    ],
)
def test_roi(grid, name, dont_use_mmap, roi, want):
    root, arr = grid
    (got,) = run_arrays(np_pipe(files=[name], file_root=root, dont_use_mmap=dont_use_mmap, **roi))
    np.testing.assert_array_equal(got, arr[want])
    assert got.flags.c_contiguous


def test_out_of_bounds_policies(grid):
    root, arr = grid
    roi = dict(files=["f.npy"], file_root=root, roi_start=[-1, 4], roi_shape=[3, 4])
    with pytest.raises(ArgumentError, match=r"ROI .*anchor \[-1, 4\].*f\.npy.*\[5, 6\]"):
        np_pipe(**roi).run()
    (trim,) = run_arrays(np_pipe(out_of_bounds_policy="trim_to_shape", **roi))
    np.testing.assert_array_equal(trim, arr[0:2, 4:6])
    (pad,) = run_arrays(np_pipe(out_of_bounds_policy="pad", fill_value=-7, **roi))
    want = np.full((3, 4), -7, np.int32)
    want[1:3, 0:2] = arr[0:2, 4:6]
    np.testing.assert_array_equal(pad, want)
    (outside,) = run_arrays(
        np_pipe(
            out_of_bounds_policy="pad",
            files=["c.npy"],
            file_root=root,
            roi_start=[9, 9],
            roi_shape=[2, 1],
        )
    )
    np.testing.assert_array_equal(outside, np.zeros((2, 1), np.int32))


def test_roi_as_per_sample_argument_input(grid):
    root, arr = grid
    pipe = Pipeline(batch_size=4, num_threads=2, device_id=None, seed=5)
    with pipe:
        start = fn.random.uniform(range=(0.0, 0.5), shape=2)
        data = fn.readers.numpy(files=["c.npy"], file_root=root, rel_roi_start=start)
        pipe.set_outputs(data, start)
    data, start = pipe.run()
    for i in range(4):
        s = np.asarray(start.at(i), np.float64)
        a = [int(np.floor(x * n + 0.5)) for x, n in zip(s, arr.shape, strict=True)]
        np.testing.assert_array_equal(data.at(i), arr[a[0] :, a[1] :])


# --- sharding ---------------------------------------------------------------------------------


@pytest.fixture
def numbered(tmp_path):
    """N .npy files under c0/ holding their index, named like conftest's make_files."""

    def make(n):
        os.makedirs(tmp_path / "npy" / "c0", exist_ok=True)
        for i in range(n):
            np.save(tmp_path / "npy" / "c0" / f"f{i:05d}.npy", np.array([i], np.int32))
        return str(tmp_path / "npy")

    return make


@pytest.mark.parametrize(
    "kw",
    [
        dict(shard_id=1, num_shards=3),
        dict(shard_id=0, num_shards=4, pad_last_batch=True),
        dict(shard_id=2, num_shards=3, stick_to_shard=True, pad_last_batch=True),
        dict(shard_id=1, num_shards=2, random_shuffle=True, initial_fill=4),
        dict(shard_id=0, num_shards=2, shuffle_after_epoch=True),
    ],
)
def test_sharding_shuffling_and_padding_match_the_file_reader(numbered, make_files, kw):
    pipe = np_pipe(file_root=numbered(13), batch_size=3, **kw)
    got = [int(a[0]) for a in run_arrays(pipe, 9)]
    want, meta = file_reader_ids(make_files, 13, 3, 9, **kw)
    assert got == want
    assert pipe.reader_meta("Reader") == meta


def test_exact_padded_shards(numbered):
    pipe = np_pipe(
        file_root=numbered(7), batch_size=2, shard_id=2, num_shards=3, pad_last_batch=True
    )
    # shards [0,2) [2,4) [4,7); ceil(7/3)=3 -> 4 samples (2 batches) per epoch
    assert pipe.reader_meta("Reader")["epoch_size_padded"] == 9
    assert [int(a[0]) for a in run_arrays(pipe, 6)] == [4, 5, 6, 6, 0, 1, 1, 1, 2, 3, 3, 3]


# --- errors -----------------------------------------------------------------------------------


def test_bad_files(tmp_path):
    np.save(tmp_path / "ok.npy", np.arange(100, dtype=np.float64))
    data = (tmp_path / "ok.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-16])
    (tmp_path / "junk.npy").write_bytes(b"PK\x03\x04 not numpy")
    (tmp_path / "hdr.npy").write_bytes(data[:8] + b"\x10\x00{'descr': '<f8',")
    np.save(tmp_path / "obj.npy", np.array([{}, 1], dtype=object), allow_pickle=True)
    offset = len(data) - 800
    for name, err, match in [
        ("cut.npy", DecodeError, rf"cut\.npy.*truncated.*offset {offset}"),
        ("junk.npy", DecodeError, r"junk\.npy.*not a \.npy file"),
        ("hdr.npy", DecodeError, r"hdr\.npy.*header"),
        ("obj.npy", DecodeError, r"obj\.npy.*unsupported dtype"),
    ]:
        for mmap in (False, True):
            with pytest.raises(err, match=match):
                np_pipe(files=[name], file_root=str(tmp_path), dont_use_mmap=mmap).run()


def test_mixed_batch_names_both_files(arrays):
    root, _ = arrays
    with pytest.raises(DecodeError, match=r"same dtype.*a\.npy.*int16.*b\.npy.*float32"):
        np_pipe(file_root=root, batch_size=2).run()
    files = ["sub2/big.npy", "a.npy"]
    pipe = np_pipe(file_root=root, files=files, batch_size=2, random_shuffle=False)
    with pytest.raises(DecodeError, match="same dtype"):
        pipe.run()
    np.save(os.path.join(root, "a3.npy"), np.zeros((1, 1, 1), np.int16))
    with pytest.raises(DecodeError, match=r"number of dimensions.*a\.npy.*2.*a3\.npy.*3"):
        np_pipe(file_root=root, files=["a.npy", "a3.npy"], batch_size=2).run()


def test_argument_errors(grid, tmp_path):
    root, _ = grid
    with pytest.raises(DataNotFoundError, match="No files found"):
        np_pipe(file_root=root, file_filter="*.none")
    with pytest.raises(DataNotFoundError, match="missing"):
        np_pipe(file_root=str(tmp_path / "missing"))
    with pytest.raises(ArgumentError, match="either files= or file_list="):
        np_pipe(files=["c.npy"], file_list="x.txt")
    with pytest.raises(ArgumentError, match="mutually exclusive"):
        np_pipe(file_root=root, roi_start=[1, 1], rel_roi_start=[0.1, 0.1])
    with pytest.raises(ArgumentError, match="mutually exclusive"):
        np_pipe(file_root=root, roi_end=[1, 1], roi_shape=[1, 1])
    with pytest.raises(ArgumentError, match=r"roi_start=\[1\] has 1 values but roi_axes=\[0, 1\]"):
        np_pipe(file_root=root, roi_start=[1], roi_axes=[0, 1])
    with pytest.raises(ArgumentError, match="out_of_bounds_policy='clip'"):
        np_pipe(file_root=root, out_of_bounds_policy="clip")
    with pytest.raises(ArgumentError, match="shuffle_after_epoch=True cannot go with random"):
        np_pipe(file_root=root, shuffle_after_epoch=True, random_shuffle=True)
    with pytest.raises(ArgumentError, match="use_o_direct"):
        np_pipe(file_root=root, use_o_direct=True)
    with pytest.raises(ArgumentError, match=r"roi_start=\[1\] has 1 values.*c\.npy.*needs 2"):
        np_pipe(files=["c.npy"], file_root=root, roi_start=[1]).run()


# --- checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [0, 4, 9])
@pytest.mark.parametrize(
    "kw",
    [
        dict(random_shuffle=True, initial_fill=5, num_shards=2, shard_id=1, pad_last_batch=True),
        dict(shuffle_after_epoch=True, num_shards=3, rel_roi_start=[0.5]),
    ],
)
def test_checkpoint_resumes(numbered, stop, kw):
    root = numbered(11)

    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=3, num_threads=2, seed=17, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            pipe.set_outputs(fn.readers.numpy(file_root=root, name="Reader", **kw))
        return pipe

    check_checkpoint_resumes(make, stop, 12)
