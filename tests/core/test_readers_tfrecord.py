"""``fn.readers.tfrecord`` on TFRecord files written here by a tiny independent encoder
(protobuf wire format and CRC-32C by hand, no TensorFlow), and the index tool."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

import dlpipe.tfrecord as tfrec
from conftest import check_checkpoint_resumes, file_reader_ids, ids_of
from dlpipe import ArgumentError, DataNotFoundError, DecodeError, Pipeline, fn, ops
from dlpipe.readers._sharding import shard_size, shard_start
from dlpipe.readers.tfrecord import crc32c
from dlpipe.tools import make_tfrecord_index
from dlpipe.tools.tfrecord2idx import main as index_main

# --- an independent encoder -----------------------------------------------------------------


def ref_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    c = ref_crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num: int, wire: int, payload: bytes | int) -> bytes:
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload  # fixed32 / fixed64


def feature(value, packed: bool = True) -> bytes:
    """One ``tf.train.Feature``: a list of bytes, floats (np.float32) or ints."""
    kind, items = value
    if kind == "bytes":
        body = b"".join(field(1, 2, s) for s in items)
        return field(1, 2, body)
    if kind == "float":
        if packed:
            body = field(1, 2, np.asarray(items, "<f4").tobytes())
        else:
            body = b"".join(field(1, 5, struct.pack("<f", x)) for x in items)
        return field(2, 2, body)
    if packed:
        body = field(1, 2, b"".join(varint(int(x)) for x in items))
    else:
        body = b"".join(field(1, 0, int(x)) for x in items)
    return field(3, 2, body)


def example(features: dict, packed: bool = True) -> bytes:
    entries = b"".join(
        field(1, 2, field(1, 2, k.encode()) + field(2, 2, feature(v, packed)))
        for k, v in features.items()
    )
    return field(1, 2, entries)


def frame(data: bytes) -> bytes:
    head = struct.pack("<Q", len(data))
    return head + struct.pack("<I", masked(head)) + data + struct.pack("<I", masked(data))


def write_tfrecord(path, payloads) -> list[tuple[int, int]]:
    """Write framed records; return the (offset, size) of each, computed independently."""
    index, offset = [], 0
    with open(path, "wb") as f:
        for p in payloads:
            rec = frame(p)
            f.write(rec)
            index.append((offset, len(rec)))
            offset += len(rec)
    return index


def record_features(i: int) -> dict:
    rng = np.random.default_rng(i)
    feats = {
        "id": ("int64", [i]),
        "image": ("bytes", [rng.integers(0, 256, 5 + 37 * i, dtype=np.uint8).tobytes()]),
        "ints": ("int64", [-i, 2**62 + i, -(2**63), 0, 300 * i][: 1 + i % 5]),
        "floats": ("float", rng.standard_normal(2 * (i % 4)).astype(np.float32).tolist()),
        "matrix": ("float", [float(i + k) for k in range(6)]),
    }
    if i % 3 == 0:
        feats["optional"] = ("int64", [7 * i, 7 * i + 1])
    return feats


@pytest.fixture
def tfrecords(tmp_path):
    """Two TFRecord files (7 + 6 records, ids 0..12) with index files made by the tool."""
    paths, idxs, expected = [], [], []
    ids = [range(0, 7), range(7, 13)]
    for k, rng_ in enumerate(ids):
        path = str(tmp_path / f"part-{k}.tfrecord")
        payloads = [example(record_features(i), packed=bool(i % 2)) for i in rng_]
        expected.append(write_tfrecord(path, payloads))
        idx = make_tfrecord_index(path, str(tmp_path / f"part-{k}.idx"))
        paths.append(path)
        idxs.append(idx)
    return paths, idxs, expected


FEATURES = {
    "id": tfrec.FixedLenFeature([], tfrec.int64, -1),
    "image": tfrec.FixedLenFeature((), tfrec.string, ""),
    "ints": tfrec.VarLenFeature(tfrec.int64, 0),
    "floats": tfrec.VarLenFeature([2], tfrec.float32, 0.0),
    "matrix": tfrec.FixedLenFeature([2, 3], tfrec.float32, 0.0),
    "optional": tfrec.FixedLenFeature([2], tfrec.int64, -5),
    "absent": tfrec.VarLenFeature(tfrec.float32, 0.0),
}


def as_list(outs, names):
    """The reader's outputs in feature order (a call returns DALI's dict, in that order)."""
    assert isinstance(outs, dict) and list(outs) == list(names)
    return [outs[n] for n in names]


def tf_pipe(paths, idxs, features=None, batch_size=1, seed=3, **kw):
    features = features or {"id": FEATURES["id"]}
    pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=None, seed=seed)
    with pipe:
        outs = fn.readers.tfrecord(
            path=paths, index_path=idxs, features=features, name="Reader", **kw
        )
        pipe.set_outputs(*as_list(outs, list(features)))
    return pipe


# --- CRC and index ----------------------------------------------------------------------------


def test_crc32c_matches_the_bitwise_reference():
    assert crc32c(b"123456789") == 0xE3069283
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 255, 256, 257, 1000, 4099):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32c(data) == ref_crc32c(data), n


def test_index_tool_matches_independent_offsets(tfrecords):
    _, idxs, expected = tfrecords
    for idx, exp in zip(idxs, expected, strict=True):
        lines = open(idx).read().splitlines()
        assert lines == [f"{o} {s}" for o, s in exp]


def test_index_cli(tfrecords, tmp_path, capsys):
    paths, _, expected = tfrecords
    out = str(tmp_path / "cli.idx")
    assert index_main([paths[1], out]) == 0
    assert capsys.readouterr().out.strip() == out
    assert open(out).read() == "".join(f"{o} {s}\n" for o, s in expected[1])
    assert index_main([str(tmp_path / "nope.tfrecord"), out]) == 1
    assert "nope.tfrecord" in capsys.readouterr().err


def test_index_tool_default_path(tfrecords):
    paths, _, _ = tfrecords
    os.remove(paths[0][: -len(".tfrecord")] + ".idx")
    assert make_tfrecord_index(paths[0]) == paths[0][: -len(".tfrecord")] + ".idx"


def test_index_tool_rejects_truncated_and_foreign_files(tfrecords, tmp_path):
    paths, _, expected = tfrecords
    data = open(paths[0], "rb").read()
    cut = str(tmp_path / "cut.tfrecord")
    last_offset = expected[0][-1][0]
    open(cut, "wb").write(data[:-3])
    with pytest.raises(DecodeError, match=rf"cut\.tfrecord.*offset {last_offset}"):
        make_tfrecord_index(cut, str(tmp_path / "cut.idx"))
    assert not os.path.exists(tmp_path / "cut.idx")
    junk = str(tmp_path / "junk.tfrecord")
    open(junk, "wb").write(b"this is not a tfrecord file")
    with pytest.raises(DecodeError, match=r"junk\.tfrecord.*length CRC.*offset 0"):
        make_tfrecord_index(junk, str(tmp_path / "junk.idx"))


# --- values -----------------------------------------------------------------------------------


def test_feature_values_shapes_and_defaults(tfrecords):
    paths, idxs, _ = tfrecords
    names = list(FEATURES)
    pipe = tf_pipe(paths, idxs, FEATURES, batch_size=13)
    outs = dict(zip(names, pipe.run(), strict=True))
    for i in range(13):
        feats = record_features(i)
        assert outs["id"].at(i).dtype == np.int64 and outs["id"].at(i).tolist() == [i]
        img = outs["image"].at(i)
        assert img.dtype == np.uint8 and img.tobytes() == feats["image"][1][0]
        ints = outs["ints"].at(i)
        assert ints.dtype == np.int64 and ints.tolist() == feats["ints"][1]
        floats = outs["floats"].at(i)
        ref = np.asarray(feats["floats"][1], np.float32).reshape(-1, 2)
        assert floats.dtype == np.float32 and floats.shape == ref.shape
        np.testing.assert_array_equal(floats, ref)
        np.testing.assert_array_equal(
            outs["matrix"].at(i), np.arange(i, i + 6, dtype=np.float32).reshape(2, 3)
        )
        opt = outs["optional"].at(i).tolist()
        assert opt == ([7 * i, 7 * i + 1] if i % 3 == 0 else [-5, -5])
        absent = outs["absent"].at(i)
        assert absent.shape == (0,) and absent.dtype == np.float32


def test_source_info_names_file_and_offset(tfrecords):
    paths, idxs, expected = tfrecords
    pipe = tf_pipe(paths, idxs, batch_size=13)
    (ids,) = pipe.run()
    infos = [ids.source_info(i) for i in range(13)]
    flat = [(paths[0], o) for o, _ in expected[0]] + [(paths[1], o) for o, _ in expected[1]]
    assert infos == [f"{p} at index {o}" for p, o in flat]


def test_scanning_without_index_gives_the_same_records(tfrecords):
    paths, idxs, _ = tfrecords
    a = ids_of(tf_pipe(paths, idxs, batch_size=5), 3)
    b = ids_of(tf_pipe(paths, None, batch_size=5), 3)
    assert a == b == list(range(13)) + [0, 1]


def test_legacy_ops_class(tfrecords):
    paths, idxs, _ = tfrecords
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=None)
    reader = ops.TFRecordReader(path=paths, index_path=idxs, features={"id": FEATURES["id"]})
    with pipe:
        outs = as_list(reader(), ["id"])
        pipe.set_outputs(*outs)
    assert ids_of(pipe, 1) == [0, 1, 2, 3]


# --- sharding ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(shard_id=1, num_shards=3),
        dict(shard_id=2, num_shards=3, stick_to_shard=True),
        dict(shard_id=0, num_shards=4, pad_last_batch=True),
        dict(shard_id=3, num_shards=4, pad_last_batch=True, stick_to_shard=True),
    ],
)
def test_sharding_and_padding_match_the_file_reader(tfrecords, make_files, kw):
    paths, idxs, _ = tfrecords
    pipe = tf_pipe(paths, idxs, batch_size=3, **kw)
    got = ids_of(pipe, 8)
    want, meta = file_reader_ids(make_files, 13, 3, 8, **kw)
    assert got == want
    assert pipe.reader_meta("Reader") == meta
    assert meta["epoch_size"] == 13


def test_exact_shards_with_padding(tfrecords):
    paths, idxs, _ = tfrecords
    # N=13, S=4, B=2: shards [0,3) [3,6) [6,9) [9,13); ceil(13/4)=4 -> 4 samples per epoch
    pipe = tf_pipe(paths, idxs, batch_size=2, shard_id=1, num_shards=4, pad_last_batch=True)
    assert pipe.reader_meta("Reader") == {
        "epoch_size": 13,
        "epoch_size_padded": 16,
        "number_of_shards": 4,
        "shard_id": 1,
        "pad_last_batch": 1,
        "stick_to_shard": 0,
    }
    assert ids_of(pipe, 6) == [3, 4, 5, 5, 6, 7, 8, 8, 9, 10, 11, 12]


def test_random_shuffle_is_a_buffer_shuffle_of_each_shard(tfrecords):
    paths, idxs, _ = tfrecords
    pipe = tf_pipe(paths, idxs, shard_id=1, num_shards=2, random_shuffle=True, initial_fill=4)
    got = ids_of(pipe, 13)
    first = got[: shard_size(13, 1, 2)]
    assert sorted(first) == list(range(shard_start(13, 1, 2), 13)) and first != sorted(first)
    assert sorted(got[len(first) :]) == list(range(shard_start(13, 1, 2)))
    # no global pre-shuffle: initial_fill=1 reads in order
    plain = tf_pipe(paths, idxs, random_shuffle=True, initial_fill=1)
    assert ids_of(plain, 13) == list(range(13))


def test_shuffle_after_epoch_shuffles_file_order(tfrecords):
    paths, idxs, _ = tfrecords
    pipe = tf_pipe(paths, idxs, shuffle_after_epoch=True)
    assert pipe.reader_meta("Reader")["stick_to_shard"] == 1
    # Recorded from DALI 2.4: its std::shuffle of 2 items with std::mt19937_64(524287 +
    # (epoch << 32)) (through fn.readers.file) leaves them in order in epochs 1, 2, 4 and 6 and
    # swaps them in epochs 3 and 5.
    in_order, swapped = list(range(13)), list(range(7, 13)) + list(range(7))
    expected = [in_order, in_order, swapped, in_order, swapped, in_order]
    assert [ids_of(pipe, 13) for _ in range(6)] == expected
    with pytest.raises(ArgumentError, match="stick_to_shard"):
        tf_pipe(paths, idxs, shuffle_after_epoch=True, stick_to_shard=True)


# --- errors -----------------------------------------------------------------------------------


def corrupt(path, offset, xor=0x55):
    data = bytearray(open(path, "rb").read())
    data[offset] ^= xor
    open(path, "wb").write(bytes(data))


def run_all(pipe, batches=13):
    for _ in range(batches):
        pipe.run()


def test_bad_data_crc_names_file_and_offset(tfrecords):
    paths, idxs, expected = tfrecords
    offset, size = expected[1][2]
    corrupt(paths[1], offset + size - 6)  # a data byte
    pipe = tf_pipe(paths, idxs)
    with pytest.raises(DecodeError, match=rf"part-1\.tfrecord.*offset {offset}.*data CRC"):
        run_all(pipe)


def test_bad_length_crc_names_file_and_offset(tfrecords):
    paths, idxs, expected = tfrecords
    offset, _ = expected[0][4]
    corrupt(paths[0], offset + 9)  # the length CRC
    with pytest.raises(DecodeError, match=rf"part-0\.tfrecord.*offset {offset}.*length CRC"):
        run_all(tf_pipe(paths, idxs))


def test_malformed_example_with_valid_crc(tmp_path):
    good = example({"id": ("int64", [1])})
    bad = field(1, 2, field(1, 2, b"\x0a\x05ab"))  # map entry whose key runs past its end
    path = str(tmp_path / "bad.tfrecord")
    index = write_tfrecord(path, [good, bad])
    idx = make_tfrecord_index(path, str(tmp_path / "bad.idx"))
    pipe = tf_pipe([path], [idx], batch_size=2)
    with pytest.raises(DecodeError, match=rf"bad\.tfrecord.*offset {index[1][0]}.*malformed"):
        pipe.run()


def test_index_entry_past_the_end(tfrecords, tmp_path):
    paths, idxs, expected = tfrecords
    end = sum(expected[0][-1])
    with open(idxs[0], "a") as f:
        f.write(f"{end} 40\n")
    with pytest.raises(DataNotFoundError, match=rf"part-0\.idx.*line 8.*offset {end}.*part-0"):
        tf_pipe(paths, idxs)


def test_index_with_wrong_size(tfrecords):
    paths, idxs, expected = tfrecords
    (o0, s0), (o1, s1) = expected[0][:2]
    open(idxs[0], "w").write(f"{o0} {s0 + s1}\n")
    with pytest.raises(DecodeError, match=rf"part-0\.tfrecord.*offset {o0}.*index"):
        tf_pipe(paths[:1], idxs[:1]).run()


def test_malformed_and_missing_index(tfrecords, tmp_path):
    paths, idxs, _ = tfrecords
    open(idxs[1], "w").write("0 20\nzero twenty\n")
    with pytest.raises(DecodeError, match=r"part-1\.idx.*line 2"):
        tf_pipe(paths, idxs)
    with pytest.raises(DataNotFoundError, match="missing.idx"):
        tf_pipe(paths, [idxs[0], str(tmp_path / "missing.idx")])


def test_fixed_len_count_mismatch(tmp_path):
    path = str(tmp_path / "f.tfrecord")
    index = write_tfrecord(path, [example({"v": ("float", [1.0, 2.0, 3.0])})])
    idx = make_tfrecord_index(path, str(tmp_path / "f.idx"))
    feats = {"v": tfrec.FixedLenFeature([2], tfrec.float32, 0.0)}
    with pytest.raises(DecodeError, match=rf"f\.tfrecord.*offset {index[0][0]}.*'v'.*3 values"):
        tf_pipe([path], [idx], feats).run()
    feats = {"v": tfrec.FixedLenFeature([3], tfrec.int64, 0)}
    with pytest.raises(DecodeError, match="float_list"):
        tf_pipe([path], [idx], feats).run()


def test_argument_errors(tfrecords):
    paths, idxs, _ = tfrecords
    with pytest.raises(ArgumentError, match="index_path has 1 entries but path has 2"):
        tf_pipe(paths, idxs[:1])
    with pytest.raises(ArgumentError, match="features"):
        tf_pipe(paths, idxs, features={"id": 3})
    with pytest.raises(ArgumentError, match="use_o_direct"):
        tf_pipe(paths, idxs, use_o_direct=True)
    with pytest.raises(ArgumentError, match="num_shards=20 is larger"):
        tf_pipe(paths, idxs, num_shards=20)
    with pytest.raises(ArgumentError, match="tensors of strings"):
        tfrec.FixedLenFeature([2], tfrec.string, "")
    with pytest.raises(ArgumentError, match="dtype=7"):
        tfrec.VarLenFeature(7, 0)
    with pytest.raises(ArgumentError, match="default_value='x'"):
        tfrec.FixedLenFeature([1], tfrec.int64, "x")


# --- checkpoints ------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [0, 4, 9])
@pytest.mark.parametrize(
    "kw",
    [
        dict(random_shuffle=True, initial_fill=5, num_shards=2, shard_id=1, pad_last_batch=True),
        dict(shuffle_after_epoch=True, random_shuffle=True, initial_fill=3),
    ],
)
def test_checkpoint_resumes(tfrecords, stop, kw):
    paths, idxs, _ = tfrecords

    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=3, num_threads=2, seed=17, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            outs = fn.readers.tfrecord(
                path=paths, index_path=idxs, features=FEATURES, name="Reader", **kw
            )
            pipe.set_outputs(*as_list(outs, list(FEATURES)))
        return pipe

    check_checkpoint_resumes(make, stop, 12)


def test_positional_reader_bounds_open_files(tmp_path):
    from dlpipe.readers.tfrecord import PositionalReader

    paths = []
    for i in range(10):
        paths.append(str(tmp_path / f"{i}.bin"))
        open(paths[-1], "wb").write(bytes(range(i, i + 20)))
    reader = PositionalReader("test", max_open=3)
    for _ in range(3):
        for i, p in enumerate(paths):
            assert reader.read(p, 5, 4).tolist() == [i + 5, i + 6, i + 7, i + 8]
            assert len(reader._fds) <= 3
    with pytest.raises(DataNotFoundError, match=r"9\.bin.*ends before offset 18"):
        reader.read(paths[9], 18, 4)
    reader.close()
