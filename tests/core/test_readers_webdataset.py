"""``fn.readers.webdataset`` over tar shards made here with ``tarfile``, and the index tool."""

from __future__ import annotations

import io
import os
import tarfile

import numpy as np
import pytest

from conftest import check_checkpoint_resumes, file_reader_ids, ids_of
from dlpipe import ArgumentError, DataNotFoundError, DecodeError, Pipeline, fn, types
from dlpipe.tools import make_webdataset_index
from dlpipe.tools.wds2idx import default_index_path
from dlpipe.tools.wds2idx import main as index_main


def add(tar: tarfile.TarFile, name: str, data: bytes = b"", kind=tarfile.REGTYPE, **kw):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    for k, v in kw.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def payload(i: int) -> bytes:
    return bytes((i * 7 + k) % 256 for k in range(3 + 50 * i))


def write_shard(path, ids, extra=None):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for i in ids:
            add(tar, f"s{i:04d}.id", np.int32(i).tobytes())
            add(tar, f"s{i:04d}.jpg" if i % 2 else f"s{i:04d}.png", payload(i))
            add(tar, f"s{i:04d}.cls", str(i % 3).encode())
        if extra:
            extra(tar)


@pytest.fixture
def shards(tmp_path):
    """Two shards: ids 0..5 and 6..10 (N = 11), each sample with .id (int32), .jpg/.png, .cls."""
    paths = [str(tmp_path / "shard-0.tar"), str(tmp_path / "shard-1.tar")]
    write_shard(paths[0], range(6))
    write_shard(paths[1], range(6, 11))
    return paths


def walk_tar(path):
    """Independent tar walk over raw 512-byte headers: (name, data offset, size) of files."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos + 512 <= len(data) and any(data[pos : pos + 512]):
        head = data[pos : pos + 512]
        name = head[:100].rstrip(b"\0").decode()
        prefix = head[345:500].rstrip(b"\0").decode()
        name = f"{prefix}/{name}" if prefix else name
        size = int(head[124:136].strip(b"\0 ") or b"0", 8)
        if head[156:157] in (b"0", b"\0"):
            out.append((name, pos + 512, size))
        pos += 512 + -(-size // 512) * 512
    return out


def wds_pipe(paths, ext=("id",), batch_size=1, seed=3, dtypes=(types.INT32,), **kw):
    pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=None, seed=seed)
    with pipe:
        outs = fn.readers.webdataset(
            paths=paths, ext=list(ext), dtypes=list(dtypes) if dtypes else None, name="Reader", **kw
        )
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    return pipe


# --- index ------------------------------------------------------------------------------------


def test_index_tool_matches_an_independent_tar_walk(shards, tmp_path):
    idx = make_webdataset_index(shards[1], str(tmp_path / "one.idx"))
    lines = open(idx).read().splitlines()
    files = walk_tar(shards[1])
    assert lines[0] == "v1.2 5"
    want = [
        " ".join(f"{n.split('.', 1)[1]} {o} {s} {n}" for n, o, s in files[k : k + 3])
        for k in range(0, len(files), 3)
    ]
    assert lines[1:] == want


def test_index_cli_and_default_path(shards, tmp_path, capsys):
    assert default_index_path("/d/shard-0.tar") == "/d/shard-0.idx"
    assert default_index_path("/d/x.y.tar") == "/d/x.idx"
    assert index_main([shards[0]]) == 0
    out = capsys.readouterr().out.strip()
    assert out == shards[0][: -len(".tar")] + ".idx" and os.path.isfile(out)
    assert index_main([str(tmp_path / "none.tar")]) == 1
    assert "none.tar" in capsys.readouterr().err


@pytest.mark.parametrize("use_index", [False, True])
def test_all_outputs_in_order(shards, tmp_path, use_index):
    idxs = [make_webdataset_index(p, str(tmp_path / f"{k}.idx")) for k, p in enumerate(shards)]
    pipe = wds_pipe(
        shards,
        ext=["id", "jpg;png", "cls"],
        dtypes=None,
        batch_size=11,
        index_paths=idxs if use_index else None,
    )
    ids, images, classes = pipe.run()
    for i in range(11):
        assert np.frombuffer(ids.at(i).tobytes(), np.int32)[0] == i
        assert images.at(i).dtype == np.uint8 and images.at(i).tobytes() == payload(i)
        assert classes.at(i).tobytes() == str(i % 3).encode()
    files = walk_tar(shards[0])
    assert ids.source_info(0) == f"{shards[0]}:{files[0][1]}:s0000.id"


def test_old_index_versions(shards, tmp_path):
    idx = make_webdataset_index(shards[0], str(tmp_path / "a.idx"))
    lines = open(idx).read().splitlines()
    old = ["v1.1 6"]
    for line in lines[1:]:
        t = line.split()
        old.append(" ".join(" ".join(t[k : k + 3]) for k in range(0, len(t), 4)))
    open(idx, "w").write("\n".join(old) + "\n")
    pipe = wds_pipe(shards[:1], index_paths=[idx], batch_size=6)
    assert ids_of(pipe, 1) == list(range(6))


def test_grouping_extensions_and_skipped_entries(tmp_path):
    path = str(tmp_path / "mixed.tar")

    def members(tar):
        add(tar, "dir", kind=tarfile.DIRTYPE)
        add(tar, "dir/a.seg.png", b"A-seg")
        add(tar, "dir/a.JPG", b"A-jpg")
        add(tar, "dir/.hidden.png", b"hidden")
        add(tar, ".meta.png", b"meta")
        add(tar, "dir/b.png", b"B-png")
        add(tar, "dir/b.link.png", kind=tarfile.SYMTYPE, linkname="b.png")
        add(tar, "dir/c.jpg", b"C-jpg")
        add(tar, "dir/c.jpg", b"C-jpg-2")  # a second component for the same output
        add(tar, "dir/a.jpg", b"A-again")  # not consecutive: a new sample

    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        members(tar)
    kw = dict(dtypes=None, batch_size=4)
    with pytest.warns(UserWarning, match="several components match output"):
        pipe = wds_pipe([path], ext=["jpg", "seg.png;png"], case_sensitive_extensions=False, **kw)
    jpg, png = pipe.run()
    got = [(jpg.at(i).tobytes(), png.at(i).tobytes()) for i in range(4)]
    assert got == [(b"A-jpg", b"A-seg"), (b"", b"B-png"), (b"C-jpg", b""), (b"A-again", b"")]
    # case sensitive: ".JPG" does not match "jpg"
    with pytest.warns(UserWarning, match="several components"):
        pipe = wds_pipe([path], ext=["jpg"], missing_component_behavior="skip", **kw)
    (jpg,) = pipe.run()
    assert [jpg.at(i).tobytes() for i in range(3)] == [b"C-jpg", b"A-again", b"C-jpg"]
    assert pipe.reader_meta("Reader")["epoch_size"] == 2
    with pytest.raises(DecodeError, match=r"underfull sample at tar file .*mixed\.tar.*'jpg'"):
        wds_pipe([path], ext=["jpg"], missing_component_behavior="error", **kw)


# --- sharding ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(shard_id=1, num_shards=3),
        dict(shard_id=2, num_shards=3, stick_to_shard=True),
        dict(shard_id=0, num_shards=4, pad_last_batch=True),
        dict(shard_id=1, num_shards=2, pad_last_batch=True, stick_to_shard=True),
    ],
)
def test_sharding_and_padding_match_the_file_reader(shards, make_files, kw):
    pipe = wds_pipe(shards, batch_size=3, **kw)
    got = ids_of(pipe, 7)
    want, meta = file_reader_ids(make_files, 11, 3, 7, **kw)
    assert got == want
    assert pipe.reader_meta("Reader") == meta and meta["epoch_size"] == 11


def test_exact_shards_with_padding(shards):
    # N=11, S=3, B=2: shards [0,3) [3,7) [7,11); ceil(11/3)=4 -> 4 samples (2 batches) per epoch
    pipe = wds_pipe(shards, batch_size=2, shard_id=0, num_shards=3, pad_last_batch=True)
    assert pipe.reader_meta("Reader") == {
        "epoch_size": 11,
        "epoch_size_padded": 12,
        "number_of_shards": 3,
        "shard_id": 0,
        "pad_last_batch": 1,
        "stick_to_shard": 0,
    }
    assert ids_of(pipe, 6) == [0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10]


def test_random_shuffle_is_a_buffer_shuffle(shards):
    pipe = wds_pipe(shards, random_shuffle=True, initial_fill=5)
    epochs = [ids_of(pipe, 11) for _ in range(2)]
    assert all(sorted(e) == list(range(11)) for e in epochs)
    assert epochs[0] != list(range(11)) and epochs[0] != epochs[1]
    assert ids_of(wds_pipe(shards, random_shuffle=True, initial_fill=1), 11) == list(range(11))


# --- errors -----------------------------------------------------------------------------------


def test_truncated_member_data(shards, tmp_path):
    data = open(shards[1], "rb").read()
    files = walk_tar(shards[1])
    name, offset, size = files[-2]  # s0010.png, 503 bytes
    cut = str(tmp_path / "cut.tar")
    open(cut, "wb").write(data[: offset + size - 10])
    with pytest.raises(DecodeError, match=rf"cut\.tar.*truncated.*{name}.*offset {offset}"):
        wds_pipe([shards[0], cut])
    with pytest.raises(DecodeError, match=rf"cut\.tar.*offset {offset}"):
        make_webdataset_index(cut, str(tmp_path / "cut.idx"))


def test_truncated_and_corrupt_header(shards, tmp_path):
    data = open(shards[0], "rb").read()
    files = walk_tar(shards[0])
    header = files[4][1] - 512  # the header of the 5th member
    cut = str(tmp_path / "cut.tar")
    open(cut, "wb").write(data[: header + 100])
    with pytest.raises(DecodeError, match=rf"cut\.tar.*truncated header at offset {header}"):
        wds_pipe([cut])
    bad = bytearray(data)
    bad[header + 148 : header + 156] = b"1234567\0"  # a wrong header checksum
    open(cut, "wb").write(bytes(bad))
    with pytest.raises(DecodeError, match=rf"cut\.tar.*corrupt header at offset {header}"):
        wds_pipe([cut])


def test_not_a_tar(tmp_path):
    path = str(tmp_path / "x.tar")
    open(path, "wb").write(b"definitely not a tar archive" * 10)
    with pytest.raises(DecodeError, match=r"x\.tar.*not a readable tar"):
        wds_pipe([path])
    with pytest.raises(DataNotFoundError, match="nothere.tar"):
        wds_pipe([str(tmp_path / "nothere.tar")])


def test_index_entry_past_the_end(shards, tmp_path):
    idx = make_webdataset_index(shards[0], str(tmp_path / "a.idx"))
    lines = open(idx).read().splitlines()
    end = os.path.getsize(shards[0])
    lines[3] += f" txt {end} 10 s0002.txt"
    open(idx, "w").write("\n".join(lines) + "\n")
    with pytest.raises(DataNotFoundError, match=rf"a\.idx.*line 3.*offset {end}.*shard-0\.tar"):
        wds_pipe(shards[:1], index_paths=[idx])


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda ls: ["v9.9 6"] + ls[1:], r"line 0: unsupported version 'v9.9'"),
        (lambda ls: ["v1.2 7"] + ls[1:], r"line 7: the header announces 7 samples"),
        (lambda ls: ls[:2] + [ls[2] + " jpg"] + ls[3:], r"line 2: every component"),
        (lambda ls: ls[:1] + [ls[1].replace(" 512 ", " 513 ", 1)] + ls[2:], r"line 1: offset 513"),
        (lambda ls: ls[:1] + [""] + ls[2:], r"line 1: no components"),
    ],
)
def test_malformed_index(shards, tmp_path, mutate, match):
    idx = make_webdataset_index(shards[0], str(tmp_path / "a.idx"))
    lines = open(idx).read().splitlines()
    assert " 512 " in lines[1]
    open(idx, "w").write("\n".join(mutate(lines)) + "\n")
    with pytest.raises(DecodeError, match=rf"a\.idx.*{match}"):
        wds_pipe(shards[:1], index_paths=[idx])


def test_argument_errors(shards):
    with pytest.raises(ArgumentError, match="index_paths has 1 entries but paths has 2"):
        wds_pipe(shards, index_paths=["a.idx"])
    with pytest.raises(ArgumentError, match="missing_component_behavior='drop'"):
        wds_pipe(shards, missing_component_behavior="drop")
    with pytest.raises(ArgumentError, match="dtypes has 2 entries but ext has 1"):
        wds_pipe(shards, dtypes=[types.INT32, types.UINT8])
    with pytest.raises(ArgumentError, match="ext="):
        wds_pipe(shards, ext=[])
    with pytest.raises(DecodeError, match=r"s0000\.jpg|s0000\.png|not a multiple of float64"):
        wds_pipe(shards, ext=["jpg;png"], dtypes=[types.FLOAT64])


# --- checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [0, 4, 9])
def test_checkpoint_resumes(shards, stop):
    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=3, num_threads=2, seed=17, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            outs = fn.readers.webdataset(
                paths=shards,
                ext=["id", "jpg;png", "cls"],
                random_shuffle=True,
                initial_fill=4,
                num_shards=3,
                shard_id=2,
                pad_last_batch=True,
                name="Reader",
            )
            pipe.set_outputs(*outs)
        return pipe

    check_checkpoint_resumes(make, stop, 12)


# Recorded from DALI 2.4 (CPU): fn.readers.webdataset(paths=<the 5 tars below>, ext=["cls"],
# shuffle_after_epoch=True[, shuffle_after_epoch_seed=5]), batch 12, the ids of 5 epochs: the
# tars' order is std::shuffle'd with std::mt19937_64(seed + (epoch << 32)) every epoch.
WDS_DALI_ORDERS = {
    None: [
        [10, 11, 5, 6, 7, 8, 3, 4, 0, 1, 2, 9],
        [5, 6, 7, 8, 3, 4, 0, 1, 2, 9, 10, 11],
        [9, 5, 6, 7, 8, 10, 11, 3, 4, 0, 1, 2],
        [0, 1, 2, 9, 5, 6, 7, 8, 3, 4, 10, 11],
        [10, 11, 9, 3, 4, 0, 1, 2, 5, 6, 7, 8],
    ],
    5: [
        [3, 4, 9, 0, 1, 2, 5, 6, 7, 8, 10, 11],
        [0, 1, 2, 5, 6, 7, 8, 3, 4, 10, 11, 9],
        [9, 5, 6, 7, 8, 0, 1, 2, 3, 4, 10, 11],
        [9, 5, 6, 7, 8, 0, 1, 2, 3, 4, 10, 11],
        [3, 4, 9, 0, 1, 2, 10, 11, 5, 6, 7, 8],
    ],
}


@pytest.mark.parametrize("seed", [None, 5])
def test_shuffle_after_epoch_shuffles_tar_order_like_dali(tmp_path, seed):
    paths, sample_id = [], 0
    for t, n in enumerate([3, 2, 4, 1, 2]):  # tar t holds samples with consecutive ids
        paths.append(str(tmp_path / f"s{t}.tar"))
        with tarfile.open(paths[-1], "w") as tar:
            for k in range(n):
                add(tar, f"sample{t}_{k}.cls", bytes([sample_id]))
                sample_id += 1
    kw = {} if seed is None else {"shuffle_after_epoch_seed": seed}
    pipe = Pipeline(batch_size=12, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(
            fn.readers.webdataset(
                paths=paths, ext=["cls"], shuffle_after_epoch=True, name="R", **kw
            )
        )
    pipe.build()
    assert pipe.reader_meta("R")["stick_to_shard"] == 1
    got = [[int(np.asarray(x).ravel()[0]) for x in pipe.run()[0]] for _ in range(5)]
    assert got == WDS_DALI_ORDERS[seed]
    with pytest.raises(ArgumentError, match="stick_to_shard"), Pipeline(batch_size=1) as bad:
        bad.set_outputs(
            fn.readers.webdataset(
                paths=paths, ext=["cls"], shuffle_after_epoch=True, stick_to_shard=True
            )
        )
        bad.build()
