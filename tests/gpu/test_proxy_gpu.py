"""The PyTorch proxy with a GPU pipeline (mixed decoding, GPU outputs): the loader's batches are
CUDA tensors equal to the pipeline fed directly, with 0 and 2 workers."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.torch]
cupy = pytest.importorskip("cupy")
torch = pytest.importorskip("torch")

from torch.utils import data as torchdata  # noqa: E402

import dlpipe.plugins.pytorch.experimental.proxy as dali_proxy  # noqa: E402
from dlpipe import fn, pipeline_def, types  # noqa: E402
from dlpipe.synthetic import make_dataset  # noqa: E402

BATCH = 4


def read_filepath(path: str) -> np.ndarray:
    return np.frombuffer(path.encode(), dtype=np.int8)


class PathDataset(torchdata.Dataset):
    def __init__(self, files, transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, idx):
        path, label = self.files[idx]
        return self.transform(read_filepath(path)), label


@pipeline_def
def gpu_pipe():
    paths = fn.external_source(name="images", no_copy=True)
    images = fn.decoders.image(fn.io.file.read(paths), device="mixed", output_type=types.RGB)
    images = fn.resize(images, size=[32, 32])
    return fn.crop_mirror_normalize(
        images, dtype=types.FLOAT, output_layout="CHW", mean=[128.0] * 3, std=[64.0] * 3
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_gpu_pipeline_behind_the_loader(tmp_path, num_workers):
    root = make_dataset(str(tmp_path), num_classes=2, per_class=6, size_range=(40, 80), seed=2)
    files = []
    for label, cls in enumerate(
        sorted(d for d in os.listdir(root) if os.path.isdir(f"{root}/{d}"))
    ):
        files += [(f"{root}/{cls}/{n}", label) for n in sorted(os.listdir(f"{root}/{cls}"))]
    ref = gpu_pipe(batch_size=BATCH, num_threads=2, device_id=0, prefetch_queue_depth=1)
    pipe = gpu_pipe(batch_size=BATCH, num_threads=2, device_id=0, prefetch_queue_depth=4)
    with dali_proxy.DALIServer(pipe) as server:
        loader = dali_proxy.DataLoader(
            server, PathDataset(files, server.proxy), batch_size=BATCH, num_workers=num_workers
        )
        for b, (images, labels) in enumerate(loader):
            assert images.is_cuda and images.dtype == torch.float32
            chunk = files[b * BATCH : (b + 1) * BATCH]
            ref.feed_input("images", [read_filepath(p) for p, _ in chunk])
            (want,) = ref.run()
            np.testing.assert_array_equal(images.cpu().numpy(), want.as_cpu().as_tensor())
            assert labels.tolist() == [lbl for _, lbl in chunk]
