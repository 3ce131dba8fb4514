"""``dlpipe bench``, ``dlpipe inspect`` and the index-tool subcommands."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile

import cv2
import numpy as np
import pytest

from dlpipe import fn, pipeline_def
from dlpipe.cli import build_bench_pipeline, main
from dlpipe.inspect_data import image_format, image_size, inspect_dataset, sharding_plan
from dlpipe.readers._sharding import shard_size, shard_start
from dlpipe.readers.file import KNOWN_EXTENSIONS, list_file_root
from dlpipe.readers.tfrecord import masked_crc32c


@pytest.fixture
def messy_root(tmp_path, image_root):
    """image_root plus a PNG, a BMP, a WebP, a truncated JPEG, an empty file, a PNG named .jpg
    and a file the reader's filters leave out."""
    root = tmp_path / "messy"
    shutil.copytree(image_root, root)
    (root / ".complete").unlink()
    cv2.imwrite(str(root / "class_000" / "p.png"), np.zeros((10, 20, 3), np.uint8))
    cv2.imwrite(str(root / "class_001" / "b.bmp"), np.zeros((12, 22, 3), np.uint8))
    cv2.imwrite(str(root / "class_001" / "w.webp"), np.zeros((11, 21, 3), np.uint8))
    ok, png = cv2.imencode(".png", np.zeros((5, 7, 3), np.uint8))
    (root / "class_002" / "png_named.jpg").write_bytes(png.tobytes())
    (root / "class_002" / "cut.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 30)
    (root / "class_003" / "empty.jpg").write_bytes(b"")
    (root / "class_003" / "notes.txt").write_text("not an image")
    return str(root)


# --- header parsing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ext,fmt", [(".jpg", "JPEG"), (".png", "PNG"), (".bmp", "BMP"), (".webp", "WebP")]
)
def test_image_size_from_headers(ext, fmt):
    ok, buf = cv2.imencode(ext, np.zeros((13, 29, 3), np.uint8))
    head = buf.tobytes()
    assert image_format(head) == fmt
    assert image_size(head) == (13, 29)


def test_image_format_magic_bytes():
    assert image_format(b"GIF89a" + struct.pack("<HH", 30, 20)) == "GIF"
    assert image_size(b"GIF89a" + struct.pack("<HH", 30, 20)) == (20, 30)
    ok, tif = cv2.imencode(".tiff", np.zeros((4, 4, 3), np.uint8))
    assert image_format(tif.tobytes()) == "TIFF" and image_size(tif.tobytes()) is None
    assert image_format(b"P6\n4 4\n255\n") == "PNM"
    assert image_format(b"hello world") == "unknown"


def test_jpeg_size_after_exif_block():
    ok, buf = cv2.imencode(".jpg", np.zeros((17, 33, 3), np.uint8))
    data = buf.tobytes()
    app1 = b"\xff\xe1" + struct.pack(">H", 2 + 1000) + b"Exif\x00\x00" + b"\x00" * 994
    assert image_size(data[:2] + app1 + data[2:]) == (17, 33)


# --- inspect ----------------------------------------------------------------------------------


def test_inspect_report(messy_root):
    r = inspect_dataset(messy_root, shards=3, batch=4)
    files, _ = list_file_root(messy_root, list(KNOWN_EXTENSIONS), None, False)
    assert r["files"] == len(files) == 32 + 6
    assert [c["name"] for c in r["classes"]] == [f"class_{i:03d}" for i in range(4)]
    assert [c["files"] for c in r["classes"]] == [9, 10, 10, 9]
    assert r["ignored"] == ["class_003/notes.txt"]
    assert r["formats"] == {"JPEG": 33, "PNG": 2, "BMP": 1, "WebP": 1}
    assert r["extension_mismatch"] == ["class_002/png_named.jpg"]
    sizes = [os.path.getsize(os.path.join(messy_root, f)) for f in files]
    assert r["bytes"]["total"] == sum(sizes) and r["bytes"]["max"] == max(sizes)
    assert r["corrupt"] == [{"file": "class_003/empty.jpg", "error": "empty file (0 bytes)"}]
    assert r["height"]["min"] == 5 and r["width"]["min"] == 7  # the PNG named .jpg
    assert r["with_dimensions"] == 36  # all but the cut JPEG (no SOF) and the empty file


def test_inspect_check_decodes_everything(messy_root):
    r = inspect_dataset(messy_root, shards=1, batch=4, check=True, threads=2)
    assert [c["file"] for c in r["corrupt"]] == ["class_002/cut.jpg", "class_003/empty.jpg"]
    assert "truncated JPEG" in r["corrupt"][0]["error"]


def test_sharding_plan_matches_the_reader(image_root):
    files, labels = list_file_root(image_root, list(KNOWN_EXTENSIONS), None, False)
    n, shards = len(files), 3
    plan = sharding_plan(n, shards, 4, labels)
    assert plan["padded_shard_size"] == 11 and plan["epoch_size_padded"] == 33
    assert plan["batches_fill"] == 3 and plan["batches_drop"] == 2

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, seed=1)
    def pipe(shard_id, shuffle):
        return fn.readers.file(
            file_root=image_root, shard_id=shard_id, num_shards=shards, random_shuffle=shuffle
        )

    for row in plan["shards"]:
        i = row["shard"]
        assert (row["start"], row["size"]) == (shard_start(n, i, shards), shard_size(n, i, shards))
        assert row["padding"] == 11 - row["size"]
        for shuffle, key in ((False, "classes"), (True, "classes_shuffled")):
            p = pipe(i, shuffle)
            got = {int(p.run()[1].at(0)[0]) for _ in range(row["size"])}
            p.close()
            assert len(got) == row[key], (i, shuffle)


def test_sharding_plan_errors():
    with pytest.raises(ValueError, match="shards=0"):
        sharding_plan(10, 0, 4)
    with pytest.raises(ValueError, match="shards=11 is larger"):
        sharding_plan(10, 11, 4)
    with pytest.raises(ValueError, match="batch=0"):
        sharding_plan(10, 2, 0)


def test_inspect_command(messy_root, tmp_path, capsys):
    out_json = tmp_path / "r.json"
    rc = main(["inspect", messy_root, "--shards", "2", "--batch", "8", "--json", str(out_json)])
    text = capsys.readouterr().out
    assert rc == 0
    assert "files: 38 in 4 classes" in text and "formats: JPEG 33, PNG 2, BMP 1, WebP 1" in text
    assert "sharding over 2 ranks" in text and "batches per epoch: 3 (FILL/PARTIAL)" in text
    assert json.loads(out_json.read_text())["sharding"]["padded_shard_size"] == 19
    assert main(["inspect", messy_root, "--check"]) == 1  # corrupt files found
    assert "class_002/cut.jpg: truncated JPEG" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err


# --- bench ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", ["seed640", "rn50"])
def test_bench_cpu(image_root, tmp_path, capsys, pipeline):
    out_json = tmp_path / "b.json"
    argv = ["bench", image_root, "--pipeline", pipeline, "--batch", "4", "--iters", "3"]
    argv += ["--threads", "2", "--out", str(tmp_path), "--json", str(out_json)]
    argv += ["--trace", str(tmp_path / "trace.json")]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for key in ("images/s", "encoded MB/s", "waiting in run()", "CPU stage", "verdict: "):
        assert key in text
    assert re.search(r"Reader +readers\.file +cpu", text)  # the per-operator table
    result = json.loads(out_json.read_text())
    assert result["img_s"] > 0 and result["stages_ms_per_batch"]["CPU stage"] > 0
    assert result["stats"]["batches"] == 3  # the warm-up is left out
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    # the encoded bytes are those of the files in the timed batches (same seed, same stream)
    pipe = build_bench_pipeline(pipeline, image_root, "cpu", 4, 1)
    batches = [pipe.run()[1] for _ in range(2 + 3)][2:]
    pipe.close()
    want = sum(
        os.path.getsize(os.path.join(image_root, b.source_info(k)))
        for b in batches
        for k in range(len(b))
    )
    assert result["encoded_bytes"] == want
    grid = cv2.imread(str(tmp_path / f"bench_{pipeline}.png"))
    assert grid.shape == (160, 4 * 160, 3)


def test_bench_dumps_other_stats_as_they_are(image_root, tmp_path, capsys, monkeypatch):
    from dlpipe.pipeline import Pipeline

    stats = {"decode": {"ms": 1.25}, "verdict": "fine"}
    monkeypatch.setattr(Pipeline, "stats", lambda self, reset=False: stats)
    argv = ["bench", image_root, "--batch", "2", "--iters", "1", "--threads", "1"]
    assert main(argv + ["--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "pipe.stats():\n  decode:\n    ms: 1.250\n  verdict: fine" in text
    assert "CPU stage" not in text


def test_bench_errors(messy_root, tmp_path, capsys):
    argv = ["--batch", "8", "--iters", "5", "--threads", "1", "--out", str(tmp_path)]
    assert main(["bench", messy_root, *argv]) == 1
    err = capsys.readouterr().err
    assert "truncated JPEG" in err or "empty input" in err
    assert "dlpipe inspect DATA_DIR --check" in err
    assert main(["bench", messy_root, *argv, "--on-error", "skip"]) == 0
    assert main(["bench", str(tmp_path / "nope"), *argv]) == 2
    assert "is not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", messy_root, "--batch", "0"])
    assert "--batch=0 must be >= 1" in capsys.readouterr().err


def test_bench_synthetic_dataset(tmp_path, capsys):
    root = tmp_path / "syn"
    argv = ["bench", str(root), "--synthetic", "16", "--batch", "4", "--iters", "1"]
    assert main(argv + ["--threads", "1", "--out", str(tmp_path)]) == 0
    assert "(16 files" in capsys.readouterr().out


# --- index tools ------------------------------------------------------------------------------


def test_make_wds_index(tmp_path, capsys):
    tar_path = tmp_path / "shard-0.tar"
    with tarfile.open(tar_path, "w") as tar:
        for key in ("a", "b"):
            for ext, data in (("jpg", b"\xff\xd8xx"), ("cls", b"1")):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    assert main(["make-wds-index", str(tar_path)]) == 0
    index = tmp_path / "shard-0.idx"
    assert capsys.readouterr().out.strip() == str(index)
    assert index.read_text().splitlines()[0] == "v1.2 2"
    assert main(["make-wds-index", str(tmp_path / "missing.tar")]) == 1


def test_make_tfrecord_index(tmp_path, capsys):
    path = tmp_path / "train.tfrecord"
    records = [b"first", b"second record"]
    with open(path, "wb") as f:
        for data in records:
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked_crc32c(length)))
            f.write(data + struct.pack("<I", masked_crc32c(data)))
    out = tmp_path / "train.idx"
    assert main(["make-tfrecord-index", str(path), str(out)]) == 0
    assert out.read_text().split("\n")[:2] == ["0 21", "21 29"]
    assert capsys.readouterr().out.strip() == str(out)


def test_python_m_dlpipe_help():
    out = subprocess.run(
        [sys.executable, "-m", "dlpipe", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    for cmd in ("demo", "bench", "inspect", "make-tfrecord-index", "make-wds-index"):
        assert cmd in out.stdout
