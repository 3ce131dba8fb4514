"""``fn.readers.mxnet`` on RecordIO files written here by an independent writer (dmlc-core's
format: magic, lrecord with continuation flags, records split where the data holds the magic,
im2rec's IRHeader), and ``dlpipe make-rec-index``."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from conftest import check_checkpoint_resumes, file_reader_ids, ids_of
from dlpipe import ArgumentError, DataNotFoundError, DecodeError, Pipeline, fn, ops
from dlpipe.cli import main as cli_main
from dlpipe.readers._sharding import shard_size, shard_start
from dlpipe.tools import make_rec_index

MAGIC = b"\x0a\x23\xd7\xce"  # 0xced7230a, little-endian

# --- an independent writer --------------------------------------------------------------------


def part(cflag: int, data: bytes) -> bytes:
    lrec = (cflag << 29) | len(data)
    return MAGIC + struct.pack("<I", lrec) + data


def encode_record(payload: bytes) -> bytes:
    """dmlc's WriteRecord: split at every 4-aligned magic (dropping it), pad the end to 4."""
    cuts = [i for i in range(0, len(payload) // 4 * 4, 4) if payload[i : i + 4] == MAGIC]
    if not cuts:
        out = part(0, payload)
    else:
        pieces, start = [], 0
        for i in cuts:
            pieces.append(payload[start:i])
            start = i + 4
        pieces.append(payload[start:])
        flags = [1] + [2] * (len(pieces) - 2) + [3]
        out = b"".join(part(f, p) for f, p in zip(flags, pieces, strict=True))
    return out + b"\0" * (-len(payload) % 4)


def ir_payload(labels: list[float], image: bytes, rec_id: int) -> bytes:
    """im2rec's record: IRHeader (flag, label, id, id2), then the labels when flag > 0."""
    if len(labels) == 1:
        return struct.pack("<IfQQ", 0, labels[0], rec_id, 0) + image
    head = struct.pack("<IfQQ", len(labels), 0.0, rec_id, 0)
    return head + struct.pack(f"<{len(labels)}f", *labels) + image


def sample(i: int) -> tuple[list[float], bytes]:
    """Record i: label(s) with the id first, an image of random bytes; every third holds the
    magic number at an aligned offset (a record of several parts), one of them twice."""
    rng = np.random.default_rng(i)
    labels = [float(i)] + [float(x) for x in np.round(rng.standard_normal(i % 3), 3)]
    image = bytearray(rng.integers(0, 256, 9 + 13 * i, dtype=np.uint8).tobytes())
    if i % 3 == 0 and len(image) >= 12:
        image[4:8] = MAGIC
        if i % 2 == 0:
            image[len(image) // 8 * 4 : len(image) // 8 * 4 + 4] = MAGIC
    if i == 12:
        image[:4] = MAGIC  # the magic right after the header
    return labels, bytes(image)


def write_rec(path, ids) -> list[int]:
    """Write records ``ids``; return their offsets, computed independently."""
    offsets, pos = [], 0
    with open(path, "wb") as f:
        for i in ids:
            labels, image = sample(i)
            rec = encode_record(ir_payload(labels, image, i))
            offsets.append(pos)
            f.write(rec)
            pos += len(rec)
    return offsets


N = 13


@pytest.fixture
def recs(tmp_path):
    """Two RecordIO files (records 0..6 and 7..12) and one index over both (DALI's layout:
    offsets through the files laid end to end), plus each file's own offsets."""
    paths = [str(tmp_path / "part-0.rec"), str(tmp_path / "part-1.rec")]
    local = [write_rec(paths[0], range(0, 7)), write_rec(paths[1], range(7, N))]
    size0 = os.path.getsize(paths[0])
    offsets = local[0] + [size0 + o for o in local[1]]
    idx = str(tmp_path / "all.idx")
    with open(idx, "w") as f:
        f.writelines(f"{k}\t{o}\n" for k, o in enumerate(offsets))
    return paths, idx, local


def rec_pipe(paths, idx, batch_size=1, seed=3, labels_only=True, **kw):
    pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=None, seed=seed)
    with pipe:
        index = [idx] if isinstance(idx, str) else idx
        images, labels = fn.readers.mxnet(path=paths, index_path=index, name="Reader", **kw)
        pipe.set_outputs(labels) if labels_only else pipe.set_outputs(images, labels)
    return pipe


# --- the index tool ---------------------------------------------------------------------------


def test_writer_makes_multi_part_records(recs):
    data = open(recs[0][0], "rb").read()
    heads = [m for m in range(0, len(data), 4) if data[m : m + 4] == MAGIC]
    flags = {struct.unpack_from("<I", data, m + 4)[0] >> 29 for m in heads}
    assert {1, 2, 3} <= flags  # the test data exercises continuation parts


def test_index_tool_matches_independent_offsets(recs, tmp_path):
    paths, _, local = recs
    for path, offsets in zip(paths, local, strict=True):
        idx = make_rec_index(path, str(tmp_path / "x.idx"))
        assert open(idx).read() == "".join(f"{k}\t{o}\n" for k, o in enumerate(offsets))


def test_index_cli_and_default_path(recs, capsys):
    paths, _, local = recs
    assert cli_main(["make-rec-index", paths[1]]) == 0
    want = paths[1][: -len(".rec")] + ".idx"
    assert capsys.readouterr().out.strip() == want
    assert open(want).read().splitlines() == [f"{k}\t{o}" for k, o in enumerate(local[1])]
    assert cli_main(["make-rec-index", paths[1] + ".missing"]) == 1
    assert "part-1.rec.missing" in capsys.readouterr().err


def test_index_tool_rejects_truncated_and_foreign_files(recs, tmp_path):
    paths, _, local = recs
    data = open(paths[0], "rb").read()
    cut = tmp_path / "cut.rec"
    cut.write_bytes(data[:-6])
    with pytest.raises(DecodeError, match=rf"cut\.rec.*offset {local[0][-1]}"):
        make_rec_index(str(cut), str(tmp_path / "cut.idx"))
    assert not (tmp_path / "cut.idx").exists()
    junk = tmp_path / "junk.rec"
    junk.write_bytes(b"this is not a RecordIO file")
    with pytest.raises(DecodeError, match=r"junk\.rec.*wrong magic.*offset 0"):
        make_rec_index(str(junk))
    # a record whose first part says "middle"
    bad = tmp_path / "bad.rec"
    bad.write_bytes(part(2, b"abcd"))
    with pytest.raises(DecodeError, match=r"bad\.rec.*continuation flag 2 at offset 0"):
        make_rec_index(str(bad))


# --- values -----------------------------------------------------------------------------------


def test_images_and_labels_exactly(recs):
    paths, idx, _ = recs
    images, labels = rec_pipe(paths, idx, batch_size=N, labels_only=False).run()
    for i in range(N):
        want_labels, want_image = sample(i)
        img, lab = images.at(i), labels.at(i)
        assert img.dtype == np.uint8 and img.ndim == 1 and img.tobytes() == want_image
        assert lab.dtype == np.float32 and lab.shape == (len(want_labels),)
        np.testing.assert_array_equal(lab, np.asarray(want_labels, np.float32))
    assert images.layout() == "" and labels.layout() == ""


def test_source_info_names_file_and_local_offset(recs):
    paths, idx, local = recs
    (labels,) = rec_pipe(paths, idx, batch_size=N).run()
    want = [f"{paths[0]} at index {o}" for o in local[0]]
    want += [f"{paths[1]} at index {o}" for o in local[1]]
    assert [labels.source_info(i) for i in range(N)] == want


def test_scanning_without_index_and_per_file_order(recs):
    paths, idx, _ = recs
    assert ids_of(rec_pipe(paths, idx, batch_size=5), 3) == list(range(N)) + [0, 1]
    assert ids_of(rec_pipe(paths, None, batch_size=5), 3) == list(range(N)) + [0, 1]


def test_index_order_and_extra_fields(recs, tmp_path):
    """DALI sorts the offsets, ignores keys, drops duplicate (zero-sized) entries."""
    paths, idx, _ = recs
    lines = open(idx).read().splitlines()
    shuffled = tmp_path / "shuffled.idx"
    shuffled.write_text("\n".join(lines[::-1] + [lines[3].replace("3\t", "99 ")]) + "\n")
    assert ids_of(rec_pipe(paths, str(shuffled), batch_size=N), 1) == list(range(N))


def test_record_running_into_the_next_file(recs, tmp_path):
    """A record cut between two files is read across them (DALI's RecordIOLoader)."""
    paths, idx, local = recs
    data = open(paths[0], "rb").read() + open(paths[1], "rb").read()
    cut = local[0][3] + 5
    split = [str(tmp_path / "a.rec"), str(tmp_path / "b.rec")]
    open(split[0], "wb").write(data[:cut])
    open(split[1], "wb").write(data[cut:])
    images, labels = rec_pipe(split, idx, batch_size=N, labels_only=False).run()
    assert [int(labels.at(i)[0]) for i in range(N)] == list(range(N))
    assert images.at(3).tobytes() == sample(3)[1]


def test_legacy_ops_classes(recs):
    paths, idx, _ = recs
    for cls in (ops.MXNetReader, ops.readers.MXNet):
        pipe = Pipeline(batch_size=4, num_threads=1, device_id=None)
        reader = cls(path=paths, index_path=[idx])
        with pipe:
            _, labels = reader(name="Reader")
            pipe.set_outputs(labels)
        assert ids_of(pipe, 1) == [0, 1, 2, 3]
    assert fn.readers.mxnet.__name__ == "mxnet"


def test_decodes_like_the_jpeg_files(image_root, tmp_path):
    """An im2rec-style .rec of real JPEGs, read and decoded: the pixels of the files."""
    import glob

    import cv2

    files = sorted(glob.glob(os.path.join(image_root, "*", "*.jpg")))[:5]
    rec = tmp_path / "jpegs.rec"
    with open(rec, "wb") as f:
        for k, name in enumerate(files):
            f.write(encode_record(ir_payload([float(k % 2)], open(name, "rb").read(), k)))
    idx = make_rec_index(str(rec))
    pipe = Pipeline(batch_size=5, num_threads=2, device_id=None)
    with pipe:
        jpegs, labels = fn.readers.mxnet(path=[str(rec)], index_path=[idx])
        pipe.set_outputs(fn.decoders.image(jpegs), labels)
    images, labels = pipe.run()
    for k, name in enumerate(files):
        want = cv2.cvtColor(cv2.imread(name), cv2.COLOR_BGR2RGB)
        np.testing.assert_array_equal(images.at(k), want)
        assert labels.at(k).tolist() == [float(k % 2)]


# --- sharding and shuffling -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(shard_id=1, num_shards=3),
        dict(shard_id=2, num_shards=3, stick_to_shard=True),
        dict(shard_id=0, num_shards=4, pad_last_batch=True),
        dict(shard_id=3, num_shards=4, pad_last_batch=True, stick_to_shard=True),
        dict(shard_id=1, num_shards=2, pad_last_batch=True),
    ],
)
def test_sharding_and_padding_match_the_file_reader(recs, make_files, kw, monkeypatch):
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")  # the reference reads in-process: fast
    paths, idx, _ = recs
    pipe = rec_pipe(paths, idx, batch_size=3, **kw)
    got = ids_of(pipe, 8)
    want, meta = file_reader_ids(make_files, N, 3, 8, **kw)
    assert got == want
    assert pipe.reader_meta("Reader") == meta


@pytest.mark.parametrize("num_shards", [1, 2, 3, 5])
def test_exact_samples_per_shard_and_epoch(recs, num_shards):
    """Every shard reads [floor(N*k/S), floor(N*(k+1)/S)) in epoch 0, the next shard in epoch
    1, and with padding the last sample again up to ceil(N/S), then up to a full batch."""
    paths, idx, _ = recs
    batch = 2
    padded = -(-N // num_shards)
    per_epoch = -(-padded // batch) * batch
    for k in range(num_shards):
        pipe = rec_pipe(
            paths, idx, batch_size=batch, shard_id=k, num_shards=num_shards, pad_last_batch=True
        )
        got = ids_of(pipe, 2 * per_epoch // batch)
        for e in range(2):
            s = (k + e) % num_shards
            lo, hi = shard_start(N, s, num_shards), shard_start(N, s + 1, num_shards)
            real = list(range(lo, hi))
            assert got[e * per_epoch : (e + 1) * per_epoch] == real + [real[-1]] * (
                per_epoch - len(real)
            )
        meta = pipe.reader_meta("Reader")
        assert meta["epoch_size"] == N
        assert meta["epoch_size_padded"] == -(-N // num_shards) * num_shards


def test_random_shuffle_is_a_seeded_buffer_shuffle(recs):
    paths, idx, _ = recs
    kw = dict(shard_id=1, num_shards=2, random_shuffle=True, initial_fill=4)
    got = ids_of(rec_pipe(paths, idx, seed=5, **kw), N)
    first = got[: shard_size(N, 1, 2)]
    assert sorted(first) == list(range(shard_start(N, 1, 2), N)) and first != sorted(first)
    assert sorted(got[len(first) :]) == list(range(shard_start(N, 1, 2)))
    assert ids_of(rec_pipe(paths, idx, seed=5, **kw), N) == got
    others = {tuple(ids_of(rec_pipe(paths, idx, seed=s, **kw), N)) for s in (6, 7, 8)}
    assert any(o != tuple(got) for o in others)
    # no global pre-shuffle: initial_fill=1 reads in order
    plain = rec_pipe(paths, idx, random_shuffle=True, initial_fill=1)
    assert ids_of(plain, N) == list(range(N))


def test_shuffle_after_epoch_shuffles_file_order(recs):
    paths, idx, _ = recs
    pipe = rec_pipe(paths, idx, shuffle_after_epoch=True, shuffle_after_epoch_seed=11)
    assert pipe.reader_meta("Reader")["stick_to_shard"] == 1
    # DALI 2.4 shuffles the 2 files with std::mt19937_64(11 + (epoch << 32)): recorded from
    # DALI 2.4 (the same std::shuffle of 2 items with that seed through fn.readers.file), the
    # files come swapped in each of epochs 1 to 8, so every epoch reads part 1, then part 0.
    for _ in range(6):
        assert ids_of(pipe, N) == list(range(7, N)) + list(range(7))
    with pytest.raises(ArgumentError, match="stick_to_shard"):
        rec_pipe(paths, idx, shuffle_after_epoch=True, stick_to_shard=True)


@pytest.mark.parametrize("stop", [0, 4, 9])
@pytest.mark.parametrize(
    "kw",
    [
        dict(random_shuffle=True, initial_fill=5, num_shards=2, shard_id=1, pad_last_batch=True),
        dict(shuffle_after_epoch=True, random_shuffle=True, initial_fill=3),
    ],
)
def test_checkpoint_resumes(recs, stop, kw):
    paths, idx, _ = recs

    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=3, num_threads=2, seed=17, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            images, labels = fn.readers.mxnet(path=paths, index_path=[idx], name="Reader", **kw)
            pipe.set_outputs(images, labels)
        return pipe

    check_checkpoint_resumes(make, stop, 12)


# --- errors -----------------------------------------------------------------------------------


def corrupt(path, offset, value: bytes):
    data = bytearray(open(path, "rb").read())
    data[offset : offset + len(value)] = value
    open(path, "wb").write(bytes(data))


def test_wrong_magic_names_file_and_offset(recs):
    paths, idx, local = recs
    corrupt(paths[1], local[1][2], b"\0\0\0\0")
    pipe = rec_pipe(paths, idx, batch_size=N)
    with pytest.raises(DecodeError, match=rf"part-1\.rec.*offset {local[1][2]}.*wrong magic"):
        pipe.run()


def test_corrupt_part_length_names_file_and_offset(recs):
    paths, idx, local = recs
    corrupt(paths[0], local[0][4] + 4, struct.pack("<I", 5000))  # a length past the record
    with pytest.raises(DecodeError, match=rf"part-0\.rec.*offset {local[0][4]}.*runs past"):
        rec_pipe(paths, idx, batch_size=N).run()


def test_too_many_labels_names_file_and_offset(recs):
    paths, idx, local = recs
    corrupt(paths[0], local[0][1] + 8, struct.pack("<I", 1000))  # IRHeader.flag
    with pytest.raises(DecodeError, match=rf"part-0\.rec.*offset {local[0][1]}.*1000 labels"):
        rec_pipe(paths, idx, batch_size=N).run()


def test_index_errors(recs, tmp_path):
    paths, idx, _ = recs
    with pytest.raises(DataNotFoundError, match=r"index file .*missing\.idx"):
        rec_pipe(paths, str(tmp_path / "missing.idx"))
    with pytest.raises(ArgumentError, match="list of one index file"):
        rec_pipe(paths, [idx, idx])
    bad = tmp_path / "bad.idx"
    bad.write_text("0\t0\n1 twelve\n")
    with pytest.raises(DecodeError, match=r"bad\.idx.*line 2"):
        rec_pipe(paths, str(bad))
    total = sum(os.path.getsize(p) for p in paths)
    bad.write_text(f"0\t0\n1\t{total}\n")
    with pytest.raises(DataNotFoundError, match=rf"bad\.idx.*line 2.*offset {total}"):
        rec_pipe(paths, str(bad))
    bad.write_text("\n")
    with pytest.raises(DecodeError, match=r"bad\.idx.*no records"):
        rec_pipe(paths, str(bad))


def test_argument_errors(recs, tmp_path):
    paths, idx, _ = recs
    with pytest.raises(DataNotFoundError, match=r"nope\.rec"):
        rec_pipe([paths[0], str(tmp_path / "nope.rec")], idx)
    with pytest.raises(ArgumentError, match="path="):
        rec_pipe([], idx)
    with pytest.raises(ArgumentError, match="num_shards=20 is larger"):
        rec_pipe(paths, idx, num_shards=20)
    with pytest.raises(ArgumentError, match="unknown argument"):
        rec_pipe(paths, idx, features={})
