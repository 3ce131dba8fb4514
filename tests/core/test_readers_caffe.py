"""``fn.readers.caffe`` and ``fn.readers.caffe2`` on LMDB databases written here with the
``lmdb`` package, their values serialized by a tiny independent protobuf encoder (Caffe's
``Datum``, Caffe2's ``TensorProtos``; no Caffe, no protobuf)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from conftest import check_checkpoint_resumes, file_reader_ids, ids_of
from dlpipe import ArgumentError, DataNotFoundError, DecodeError, Pipeline, fn, ops
from dlpipe.readers._sharding import shard_size, shard_start

lmdb = pytest.importorskip("lmdb")

# --- an independent protobuf encoder ----------------------------------------------------------


def varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num: int, wire: int, payload) -> bytes:
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def datum(data=None, label=None, encoded=None, shape=None, float_data=()) -> bytes:
    out = b""
    if shape is not None:
        h, w, c = shape
        out += field(1, 0, c) + field(2, 0, h) + field(3, 0, w)
    if data is not None:
        out += field(4, 2, data)
    if label is not None:
        out += field(5, 0, label)
    out += b"".join(field(6, 5, struct.pack("<f", x)) for x in float_data)
    if encoded is not None:
        out += field(7, 0, int(encoded))
    return out


def tensor(dtype: int, values=(), dims=(), data=None, strings=(), packed=True) -> bytes:
    """A TensorProto: FLOAT=1, INT32=2, BYTE=3, STRING=4, INT64=10 (dtype None: left out,
    which means FLOAT)."""
    out = b"".join(field(1, 0, d) for d in dims)
    if dtype is not None:
        out += field(2, 0, dtype)
    if dtype in (1, None) and len(values):
        if packed:
            out += field(3, 2, np.asarray(values, "<f4").tobytes())
        else:
            out += b"".join(field(3, 5, struct.pack("<f", v)) for v in values)
    if dtype in (2, 10) and len(values):
        num = 4 if dtype == 2 else 10
        if packed:
            out += field(num, 2, b"".join(varint(int(v)) for v in values))
        else:
            out += b"".join(field(num, 0, int(v)) for v in values)
    if data is not None:
        out += field(5, 2, data)
    out += b"".join(field(6, 2, s) for s in strings)
    return out


def tensor_protos(*tensors: bytes) -> bytes:
    return b"".join(field(1, 2, t) for t in tensors)


def write_lmdb(path, values: list[bytes], first_key: int = 0) -> list[bytes]:
    env = lmdb.open(str(path), map_size=1 << 24, subdir=True)
    keys = [f"{first_key + i:08d}_img".encode() for i in range(len(values))]
    with env.begin(write=True) as txn:
        for k, v in zip(keys, values, strict=True):
            txn.put(k, v)
    env.close()
    return keys


N = 13


def image_bytes(i: int) -> bytes:
    return np.random.default_rng(i).integers(0, 256, 5 + 11 * i, dtype=np.uint8).tobytes()


def raw_image(i: int) -> np.ndarray:
    return np.random.default_rng(100 + i).integers(
        0, 256, (2 + i % 3, 3, 1 + 2 * (i % 2)), np.uint8
    )


def caffe_value(i: int) -> bytes:
    """Entry i: encoded (the encoded flag absent or true) or raw pixels every fourth."""
    if i % 4 == 3:
        img = raw_image(i)
        return datum(img.tobytes(), label=i, encoded=False, shape=img.shape, float_data=[1.5])
    return datum(image_bytes(i), label=i, encoded=True if i % 2 else None)


@pytest.fixture
def caffe_dbs(tmp_path):
    """Two Caffe LMDBs (entries 0..6 and 7..12), stored in shuffled key order."""
    paths = [tmp_path / "db0", tmp_path / "db1"]
    keys = write_lmdb(paths[0], [caffe_value(i) for i in range(7)])
    keys += write_lmdb(paths[1], [caffe_value(i) for i in range(7, N)], first_key=7)
    return [str(p) for p in paths], keys


def caffe_pipe(paths, batch_size=1, seed=3, labels_only=True, **kw):
    pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=None, seed=seed)
    with pipe:
        images, labels = fn.readers.caffe(path=paths, name="Reader", **kw)
        pipe.set_outputs(labels) if labels_only else pipe.set_outputs(images, labels)
    return pipe


# --- Caffe: values ----------------------------------------------------------------------------


def test_caffe_images_and_labels_exactly(caffe_dbs):
    paths, keys = caffe_dbs
    images, labels = caffe_pipe(paths, batch_size=N, labels_only=False).run()
    for i in range(N):
        img, lab = images.at(i), labels.at(i)
        if i % 4 == 3:
            want = raw_image(i)
            assert img.shape == want.shape  # (H, W, C) as DALI reshapes the bytes
            np.testing.assert_array_equal(img, want)
        else:
            assert img.ndim == 1 and img.tobytes() == image_bytes(i)
        assert img.dtype == np.uint8
        assert lab.dtype == np.int32 and lab.shape == (1,) and lab.tolist() == [i]
    db_of = [paths[0]] * 7 + [paths[1]] * 6
    infos = [images.source_info(i) for i in range(N)]
    assert infos == [f"{d} at key {k.decode()}" for d, k in zip(db_of, keys, strict=True)]


def test_caffe_single_path_string_and_key_order(tmp_path):
    """One path as a string; entries come in key order, not insertion order."""
    path = tmp_path / "db"
    env = lmdb.open(str(path), map_size=1 << 20)
    with env.begin(write=True) as txn:
        for i in (3, 0, 2, 1):
            txn.put(f"k{i}".encode(), datum(b"x" * i, label=-7 * i))
    env.close()
    images, labels = caffe_pipe(str(path), batch_size=4, labels_only=False).run()
    assert [labels.at(i).tolist() for i in range(4)] == [[0], [-7], [-14], [-21]]
    assert [images.at(i).size for i in range(4)] == [0, 1, 2, 3]


def test_caffe_same_database_twice_and_in_two_pipelines(caffe_dbs):
    """One LMDB environment per process is shared (LMDB allows one), as DALI's
    ``path=[db, db]`` test needs."""
    paths, _ = caffe_dbs
    twice = caffe_pipe([paths[0], paths[0]], batch_size=14)
    other = caffe_pipe(paths[0], batch_size=7)
    assert ids_of(twice, 1) == list(range(7)) * 2
    assert ids_of(other, 1) == list(range(7))
    twice.close()
    assert ids_of(other, 1) == list(range(7))  # still open for the other reader


def test_caffe_image_or_label_only(caffe_dbs):
    paths, _ = caffe_dbs
    for kw, want in ((dict(image_available=False), "label"), (dict(label_available=False), "img")):
        pipe = Pipeline(batch_size=3, num_threads=1, device_id=None)
        with pipe:
            out = fn.readers.caffe(path=paths, **kw)
            pipe.set_outputs(out)
        (only,) = pipe.run()
        if want == "label":
            assert [only.at(i).tolist() for i in range(3)] == [[0], [1], [2]]
        else:
            assert [only.at(i).tobytes() for i in range(3)] == [image_bytes(i) for i in range(3)]
    with pytest.raises(ArgumentError, match="no output"):
        caffe_pipe(paths, image_available=False, label_available=False)


def test_caffe_legacy_ops_classes(caffe_dbs):
    paths, _ = caffe_dbs
    for cls in (ops.CaffeReader, ops.readers.Caffe):
        pipe = Pipeline(batch_size=4, num_threads=1, device_id=None)
        reader = cls(path=paths)
        with pipe:
            _, labels = reader(name="Reader")
            pipe.set_outputs(labels)
        assert ids_of(pipe, 1) == [0, 1, 2, 3]


# --- Caffe: sharding, shuffling, checkpoints --------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        dict(shard_id=1, num_shards=3),
        dict(shard_id=2, num_shards=3, stick_to_shard=True),
        dict(shard_id=0, num_shards=4, pad_last_batch=True),
        dict(shard_id=3, num_shards=4, pad_last_batch=True, stick_to_shard=True),
    ],
)
def test_caffe_sharding_and_padding_match_the_file_reader(caffe_dbs, make_files, kw, monkeypatch):
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")  # the reference reads in-process: fast
    paths, _ = caffe_dbs
    pipe = caffe_pipe(paths, batch_size=3, **kw)
    got = ids_of(pipe, 8)
    want, meta = file_reader_ids(make_files, N, 3, 8, **kw)
    assert got == want
    assert pipe.reader_meta("Reader") == meta


@pytest.mark.parametrize("num_shards", [1, 2, 3, 5])
def test_caffe_exact_samples_per_shard_and_epoch(caffe_dbs, num_shards):
    paths, _ = caffe_dbs
    batch = 2
    padded = -(-N // num_shards)
    per_epoch = -(-padded // batch) * batch
    for k in range(num_shards):
        pipe = caffe_pipe(
            paths, batch_size=batch, shard_id=k, num_shards=num_shards, pad_last_batch=True
        )
        got = ids_of(pipe, 2 * per_epoch // batch)
        for e in range(2):
            s = (k + e) % num_shards
            real = list(range(shard_start(N, s, num_shards), shard_start(N, s + 1, num_shards)))
            want = real + [real[-1]] * (per_epoch - len(real))
            assert got[e * per_epoch : (e + 1) * per_epoch] == want
        assert pipe.reader_meta("Reader")["epoch_size_padded"] == padded * num_shards


def test_caffe_random_shuffle_is_a_seeded_buffer_shuffle(caffe_dbs):
    paths, _ = caffe_dbs
    kw = dict(shard_id=1, num_shards=2, random_shuffle=True, initial_fill=4)
    got = ids_of(caffe_pipe(paths, seed=5, **kw), N)
    first = got[: shard_size(N, 1, 2)]
    assert sorted(first) == list(range(shard_start(N, 1, 2), N)) and first != sorted(first)
    assert ids_of(caffe_pipe(paths, seed=5, **kw), N) == got
    assert any(ids_of(caffe_pipe(paths, seed=s, **kw), N) != got for s in (6, 7, 8))
    assert ids_of(caffe_pipe(paths, random_shuffle=True, initial_fill=1), N) == list(range(N))


@pytest.mark.parametrize("stop", [0, 5])
def test_caffe_checkpoint_resumes(caffe_dbs, stop):
    paths, _ = caffe_dbs

    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=3, num_threads=2, seed=17, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            images, labels = fn.readers.caffe(
                path=paths,
                name="Reader",
                random_shuffle=True,
                initial_fill=5,
                num_shards=2,
                shard_id=1,
                pad_last_batch=True,
            )
            pipe.set_outputs(images, labels)
        return pipe

    check_checkpoint_resumes(make, stop, 11)


# --- Caffe: errors ----------------------------------------------------------------------------


def one_entry_db(tmp_path, value: bytes, name="bad") -> str:
    write_lmdb(tmp_path / name, [value])
    return str(tmp_path / name)


def test_caffe_errors_name_the_database_and_key(tmp_path):
    path = one_entry_db(tmp_path, b"\x22\x05ab")  # data whose length runs past the message
    with pytest.raises(DecodeError, match=r"Caffe Datum at .*bad at key 00000000_img.*4 bytes"):
        caffe_pipe(path).run()
    path = one_entry_db(tmp_path, datum(b"abc", label=None), "nolabel")
    with pytest.raises(DecodeError, match=r"nolabel at key 00000000_img has no label"):
        caffe_pipe(path).run()
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(fn.readers.caffe(path=path, label_available=False))
    assert pipe.run()[0].at(0).tobytes() == b"abc"
    path = one_entry_db(tmp_path, datum(b"abcde", 1, encoded=False, shape=(2, 2, 1)), "raw")
    with pytest.raises(DecodeError, match=r"raw at key 00000000_img holds 5 bytes.*\(2, 2, 1\)"):
        caffe_pipe(path).run()
    path = one_entry_db(tmp_path, datum(None, 1), "noimage")
    with pytest.raises(DecodeError, match=r"noimage at key 00000000_img has no image"):
        caffe_pipe(path, labels_only=False).run()


def test_caffe_missing_and_foreign_databases(caffe_dbs, tmp_path):
    paths, _ = caffe_dbs
    with pytest.raises(DataNotFoundError, match=r"LMDB directory .*nowhere.* does not exist"):
        caffe_pipe([paths[0], str(tmp_path / "nowhere")])
    (tmp_path / "notdb").mkdir()
    (tmp_path / "notdb" / "data.mdb").write_bytes(b"not an lmdb file" * 512)
    with pytest.raises(DataNotFoundError, match=r"notdb.* is not a readable LMDB"):
        caffe_pipe(str(tmp_path / "notdb"))
    write_lmdb(tmp_path / "empty", [])
    with pytest.raises(DataNotFoundError, match="empty"):
        caffe_pipe(str(tmp_path / "empty"))
    with pytest.raises(ArgumentError, match="path="):
        caffe_pipe([])
    with pytest.raises(ArgumentError, match="num_shards=20 is larger"):
        caffe_pipe(paths, num_shards=20)


def test_missing_lmdb_package_names_the_extra(caffe_dbs, monkeypatch):
    import sys

    from dlpipe import MissingExtraError

    monkeypatch.setitem(sys.modules, "lmdb", None)
    with pytest.raises(MissingExtraError, match=r'pip install "dlpipe\[lmdb\]"'):
        caffe_pipe(caffe_dbs[0])


# --- Caffe2 -----------------------------------------------------------------------------------

FLOAT, INT32, BYTE, STRING, INT64 = 1, 2, 3, 4, 10


def c2_image(i: int) -> bytes:
    if i % 3 == 2:  # raw pixels
        img = raw_image(i)
        dims = img.shape if i % 2 else img.shape[:2]
        data = img.tobytes() if i % 2 else img[..., 0].tobytes()
        return tensor(BYTE, dims=dims, data=data)
    return tensor(STRING, strings=[image_bytes(i), b"ignored"])


def c2_want_image(i: int) -> np.ndarray:
    if i % 3 == 2:
        img = raw_image(i)
        return img if i % 2 else img[..., :1]
    return np.frombuffer(image_bytes(i), np.uint8)


def c2_pipe(paths, batch_size=1, seed=3, select=slice(None), **kw):
    """A pipeline of ``fn.readers.caffe2(**kw)``'s outputs (``select``: which of them)."""
    pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=None, seed=seed)
    with pipe:
        out = fn.readers.caffe2(path=paths, name="Reader", **kw)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,))[select])
    return pipe


@pytest.fixture
def c2_single(tmp_path):
    """Entries: image, INT32 label i, a FLOAT and an INT64 additional tensor, a bbox."""
    values = [
        tensor_protos(
            c2_image(i),
            tensor(INT32, [i], dims=[1], packed=bool(i % 2)),
            tensor(None, [0.5 * i, -1.0]),
            tensor(INT64, [2**40 + i, -i]),
            tensor(INT32, [i, i + 1, i + 2, i + 3]),
        )
        for i in range(N)
    ]
    write_lmdb(tmp_path / "c2", values[:5])
    write_lmdb(tmp_path / "c2b", values[5:], first_key=5)
    return [str(tmp_path / "c2"), str(tmp_path / "c2b")]


def test_caffe2_single_label_with_additional_inputs_and_bbox(c2_single):
    pipe = c2_pipe(c2_single, batch_size=N, additional_inputs=2, bbox=True)
    images, labels, floats, int64s, boxes = pipe.run()
    for i in range(N):
        want = c2_want_image(i)
        assert images.at(i).dtype == np.uint8 and images.at(i).shape == want.shape
        np.testing.assert_array_equal(images.at(i), want)
        assert labels.at(i).dtype == np.int32 and labels.at(i).tolist() == [i]
        assert floats.at(i).dtype == np.float32 and floats.at(i).tolist() == [0.5 * i, -1.0]
        assert int64s.at(i).dtype == np.int64 and int64s.at(i).tolist() == [2**40 + i, -i]
        assert boxes.at(i).dtype == np.int32 and boxes.at(i).tolist() == [i, i + 1, i + 2, i + 3]
    assert images.source_info(6) == f"{c2_single[1]} at key 00000006_img"


def test_caffe2_default_outputs_and_legacy_classes(c2_single):
    """The Pax example: ``jpegs, labels = fn.readers.caffe2(path=...)``."""
    images, labels = c2_pipe(c2_single[0], batch_size=5).run()
    assert [labels.at(i).tolist() for i in range(5)] == [[i] for i in range(5)]
    assert images.at(0).tobytes() == image_bytes(0)
    for cls in (ops.Caffe2Reader, ops.readers.Caffe2):
        pipe = Pipeline(batch_size=3, num_threads=1, device_id=None)
        reader = cls(path=c2_single)
        with pipe:
            _, labels = reader(name="Reader")
            pipe.set_outputs(labels)
        assert ids_of(pipe, 1) == [0, 1, 2]


def test_caffe2_label_types(tmp_path):
    k = 6  # num_labels
    rng = np.random.default_rng(1)
    rows = []
    for i in range(5):
        active = sorted(rng.choice(k, size=1 + i % 3, replace=False).tolist())
        weights = np.round(rng.random(len(active)), 3).astype(np.float32)
        dense = rng.standard_normal(k).astype(np.float32)
        rows.append((active, weights, dense))
    path = tmp_path / "labels"

    def db(name, make):
        write_lmdb(tmp_path / name, [make(*r) for r in rows])
        return str(tmp_path / name)

    img = tensor(STRING, strings=[b"jpeg"])
    skipped = tensor(INT32, [-1])
    sparse = db(
        "sparse",
        lambda a, w, d: tensor_protos(img, tensor(INT32, a), skipped, tensor(INT32, [9])),
    )
    sparse_f = db("sparse_f", lambda a, w, d: tensor_protos(img, tensor(FLOAT, a)))
    weighted = db(
        "weighted",
        lambda a, w, d: tensor_protos(img, tensor(INT32, a), tensor(FLOAT, w), tensor(INT32, [7])),
    )
    dense = db("dense", lambda a, w, d: tensor_protos(img, tensor(FLOAT, d)))
    del path

    _, labels, extra, indices = c2_pipe(
        sparse, 5, label_type=1, num_labels=k, additional_inputs=1
    ).run()
    for i, (active, _, _) in enumerate(rows):
        want = np.zeros(k, np.int32)
        want[active] = 1
        assert labels.at(i).dtype == np.int32
        np.testing.assert_array_equal(labels.at(i), want)
        assert extra.at(i).tolist() == [9]  # DALI skips one tensor after sparse labels
        assert indices.at(i).tolist() == active
    _, labels, _ = c2_pipe(sparse_f, 5, label_type=1, num_labels=k).run()
    assert labels.at(0).dtype == np.float32
    assert np.flatnonzero(labels.at(0)).tolist() == rows[0][0]

    _, labels, extra, indices = c2_pipe(
        weighted, 5, label_type=3, num_labels=k, additional_inputs=1
    ).run()
    for i, (active, weights, _) in enumerate(rows):
        want = np.zeros(k, np.float32)
        want[active] = weights
        assert labels.at(i).dtype == np.float32
        np.testing.assert_array_equal(labels.at(i), want)
        assert extra.at(i).tolist() == [7]
        assert indices.at(i).tolist() == active

    _, labels = c2_pipe(dense, 5, label_type=2).run()
    for i, (_, _, d) in enumerate(rows):
        assert labels.at(i).dtype == np.float32
        np.testing.assert_array_equal(labels.at(i), d)

    (images,) = c2_pipe(dense, 2, label_type=4).run()
    assert images.at(1).tobytes() == b"jpeg"


@pytest.mark.parametrize(
    "kw", [dict(shard_id=1, num_shards=3), dict(num_shards=4, pad_last_batch=True)]
)
def test_caffe2_sharding_matches_the_file_reader(c2_single, make_files, kw, monkeypatch):
    monkeypatch.setenv("DLPIPE_READ_PROCESS", "0")  # the reference reads in-process: fast
    pipe = c2_pipe(c2_single, batch_size=3, select=slice(1, 2), **kw)
    want, meta = file_reader_ids(make_files, N, 3, 8, **kw)
    assert ids_of(pipe, 8) == want
    assert pipe.reader_meta("Reader") == meta


@pytest.mark.parametrize("stop", [0, 4])
def test_caffe2_checkpoint_resumes(c2_single, stop):
    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=3, num_threads=2, seed=17, enable_checkpointing=True, checkpoint=checkpoint
        )
        with pipe:
            out = fn.readers.caffe2(
                path=c2_single,
                name="Reader",
                random_shuffle=True,
                initial_fill=4,
                additional_inputs=2,
                bbox=True,
            )
            pipe.set_outputs(*out)
        return pipe

    check_checkpoint_resumes(make, stop, 10)


@pytest.mark.parametrize(
    "value, kw, match",
    [
        (
            tensor_protos(tensor(INT32, [999])),
            dict(image_available=False, label_type=1, num_labels=10),
            r"Label index out of bounds: 999.*num_labels=10",
        ),
        (
            tensor_protos(tensor(INT32, [4]), tensor(FLOAT, [1.0])),
            dict(image_available=False, label_type=3, num_labels=3),
            r"Label index out of bounds: 4",
        ),
        (
            tensor_protos(tensor(BYTE, dims=[2, 2, 1], data=b"\0\0\0"), tensor(INT32, [0])),
            {},
            r"Image data size mismatch: dims \[2, 2, 1\] need 4 bytes",
        ),
        (
            tensor_protos(tensor(STRING, strings=[b"x"])),
            {},
            r"holds 1 tensors; the label would be tensor 1",
        ),
        (
            tensor_protos(tensor(STRING, strings=[b"x"]), tensor(INT32, [1, 2])),
            {},
            r"SINGLE_LABEL needs one label value, tensor 1 has 2",
        ),
        (
            tensor_protos(tensor(STRING, strings=[b"x"]), tensor(INT64, [1])),
            {},
            r"unsupported label data_type INT64",
        ),
        (
            tensor_protos(tensor(INT32, [1, 2]), tensor(INT32, [0])),
            {},
            r"unsupported image data_type INT32",
        ),
        (
            tensor_protos(
                tensor(STRING, strings=[b"x"]), tensor(INT32, [1]), tensor(FLOAT, [1, 2])
            ),
            dict(bbox=True),
            r"bounding box \(tensor 2\) must be INT32 with 4 values",
        ),
        (
            tensor_protos(
                tensor(STRING, strings=[b"x"]), tensor(INT32, [1]), tensor(STRING, strings=[b"s"])
            ),
            dict(additional_inputs=1),
            r"additional input 0 \(tensor 2\): unsupported data_type STRING",
        ),
        (b"\x0a\x09\x08", {}, r"error while parsing the Caffe2 TensorProtos at .*3 bytes"),
    ],
)
def test_caffe2_errors_name_the_entry(tmp_path, value, kw, match):
    path = one_entry_db(tmp_path, value)
    with pytest.raises(DecodeError, match=r"readers\.caffe2: .*bad at key 00000000_img"):
        c2_pipe(path, **kw).run()
    with pytest.raises(DecodeError, match=match):
        c2_pipe(path, **kw).run()


def test_caffe2_argument_errors(c2_single):
    with pytest.raises(ArgumentError, match="label_type=7"):
        c2_pipe(c2_single, label_type=7)
    with pytest.raises(ArgumentError, match="num_labels=0"):
        c2_pipe(c2_single, label_type=1, num_labels=0)
    with pytest.raises(ArgumentError, match="additional_inputs=-1"):
        c2_pipe(c2_single, additional_inputs=-1)
    with pytest.raises(ArgumentError, match="no output"):
        c2_pipe(c2_single, image_available=False, label_type=4)
