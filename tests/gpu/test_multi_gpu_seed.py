"""The seed multi-GPU scripts on every GPU of the machine: one pipeline per GPU, chosen by
``device_id``, each reading its own shard (``shard_id``/``num_shards``), in the ``fn`` style of
the Korean blog (``tests/seed_script.py``, ending ``labels[0]``) and in the legacy ``ops``
style of DALI's multi-GPU tutorial. Each pipeline's outputs live on its own GPU, and over one
epoch (``LastBatchPolicy.PARTIAL``) the shards together hold every file exactly once."""

from __future__ import annotations

import os

import numpy as np
import pytest
from seed_script import create_dali_pipeline

from dlpipe import ops, types
from dlpipe.pipeline import Pipeline
from dlpipe.plugins.pytorch import DALIGenericIterator, LastBatchPolicy

pytestmark = pytest.mark.multi_gpu
cupy = pytest.importorskip("cupy")
cv2 = pytest.importorskip("cv2")
torch = pytest.importorskip("torch")

FILES = 37  # not a multiple of the shard count or the batch: padding and a partial batch


def _gpus() -> int:
    return cupy.cuda.runtime.getDeviceCount()


@pytest.fixture(scope="module")
def one_file_per_class(tmp_path_factory):
    """FILES photo-sized JPEGs, each alone in its class folder: its label names the file."""
    root = tmp_path_factory.mktemp("seed")
    rng = np.random.default_rng(3)
    for i in range(FILES):
        os.makedirs(root / f"c{i:03d}")
        h, w = rng.integers(60, 120, 2)
        img = rng.integers(0, 256, (h, w, 3), np.uint8)
        cv2.imwrite(str(root / f"c{i:03d}" / "x.jpg"), img)
    return str(root)


class LegacyPipe(Pipeline):
    """DALI's multi-GPU tutorial in the ``ops`` style: the reader takes the rank's shard."""

    def __init__(self, root, batch_size, device_id, shard_id, num_shards):
        super().__init__(batch_size, 2, device_id, seed=7)
        self.input = ops.readers.File(
            file_root=root,
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=True,
            pad_last_batch=True,
            name="Reader",
        )
        self.decode = ops.decoders.Image(device="mixed", output_type=types.RGB)
        self.res = ops.Resize(device="gpu", resize_x=32, resize_y=32)

    def define_graph(self):
        jpegs, labels = self.input()
        return self.res(self.decode(jpegs)), labels.gpu()


def _seed(root, batch_size, device_id, shard_id, num_shards):
    return create_dali_pipeline(
        data_dir=root,
        crop=24,
        size=32,
        shard_id=shard_id,
        num_shards=num_shards,
        batch_size=batch_size,
        num_threads=2,
        device_id=device_id,
        seed=7,
    )


@pytest.mark.parametrize("style", [_seed, LegacyPipe], ids=["fn-seed-script", "ops-legacy"])
def test_one_pipeline_per_gpu_each_reading_its_shard(one_file_per_class, style):
    n = _gpus()
    if n < 2:
        pytest.skip("needs 2 GPUs")
    batch = 4
    seen = []
    for k in range(n):
        pipe = style(one_file_per_class, batch, device_id=k, shard_id=k, num_shards=n)
        it = DALIGenericIterator(
            pipe, ["data", "label"], reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL
        )
        labels = []
        for data in it:
            x, y = data[0]["data"], data[0]["label"]
            assert x.device == torch.device("cuda", k) and y.device == torch.device("cuda", k)
            if style is _seed:  # labels[0]: one scalar per sample; CHW float crops
                assert y.shape == (x.shape[0],) and tuple(x.shape[1:]) == (3, 24, 24)
                assert x.dtype == torch.float32
            else:
                assert tuple(x.shape[1:]) == (32, 32, 3) and x.dtype == torch.uint8
            labels += y.reshape(-1).tolist()
        # PARTIAL with reader_name: exactly the shard's files, [N*k/n, N*(k+1)/n)
        assert len(labels) == FILES * (k + 1) // n - FILES * k // n, (k, len(labels))
        assert len(set(labels)) == len(labels)
        seen += labels
        del it
        pipe.close()
    assert sorted(seen) == list(range(FILES))
