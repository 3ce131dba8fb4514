"""DALI's own PyTorch training examples, their pipelines unchanged but for imports: EfficientNet
(``--automatic-augmentation autoaugment`` / ``trivialaugment`` / none, validation, and the
``dali`` and ``dali_proxy`` data backends) and ResNet-50 (``--data_loader dali`` and
``dali_proxy``, with and without ``--dali_cpu``).

Their code is not copied into this repository: set ``DLPIPE_DALI_ROOT`` to a checkout of
https://github.com/NVIDIA/DALI. The tests read ``docs/examples/use_cases/pytorch/...`` from it,
change the imports (``nvidia.dali.plugin`` -> ``dlpipe.plugins``, ``nvidia.dali`` ->
``dlpipe``) and run the pipeline definitions on a tiny generated dataset:

* on the CPU, every variant's graph is built (the examples move the images to the GPU even
  with ``--dali_cpu``, so nothing more runs without one);
* with a GPU, one epoch of each goes through the loaders the examples' ``main`` uses
  (``DALIClassificationIterator``, or the proxy's ``DALIServer`` + ``DataLoader`` with workers
  and pinned memory), checking the batches' shapes, types and labels.

ResNet-50's ``main.py`` imports torchvision at the top; its pipeline functions are taken out of
it (by name, with their decorators) and run with the imports they use, so torchvision is not
needed. The proxy loaders use torchvision's ``ImageFolder`` when it is installed, else an
equivalent written here.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from dlpipe.synthetic import make_dataset

DALI_ROOT = os.environ.get("DLPIPE_DALI_ROOT")
EXAMPLES = Path(DALI_ROOT or ".") / "docs" / "examples" / "use_cases" / "pytorch"
EFFNET = EXAMPLES / "efficientnet" / "image_classification" / "dali.py"
RESNET = EXAMPLES / "resnet50" / "main.py"
RESNET_FUNCTIONS = ("image_processing_func", "create_dali_pipeline", "create_dali_proxy_pipeline")

pytestmark = pytest.mark.skipif(
    DALI_ROOT is None,
    reason="set DLPIPE_DALI_ROOT to a checkout of github.com/NVIDIA/DALI to run its examples "
    "(their code is read from there, not copied here)",
)

BATCH, SIZE = 4, 64  # EfficientNet image size (ResNet-50's example fixes 224)


def port(source: str) -> str:
    """DALI's imports -> dlpipe's (the only change made to the examples)."""
    source = re.sub(r"\bnvidia\.dali\.plugin\b", "dlpipe.plugins", source)
    return re.sub(r"\bnvidia\.dali\b", "dlpipe", source)


def _import(path: Path, name: str):
    """Import a file as a module (conditionals read the functions' source from it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _require(path: Path) -> str:
    if not path.is_file():
        pytest.skip(f"{path} is missing from DLPIPE_DALI_ROOT={DALI_ROOT}")
    return path.read_text()


@pytest.fixture(scope="module")
def effnet(tmp_path_factory):
    out = tmp_path_factory.mktemp("effnet") / "effnet_dali.py"
    out.write_text(port(_require(EFFNET)))
    return _import(out, "effnet_dali")


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """ResNet-50's pipeline functions, as they are, under the imports main.py gives them."""
    source = port(_require(RESNET))
    tree = ast.parse(source)
    lines = source.splitlines()
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in RESNET_FUNCTIONS:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            found[node.name] = "\n".join(lines[start : node.end_lineno])
    missing = sorted(set(RESNET_FUNCTIONS) - set(found))
    if missing:
        pytest.skip(f"{RESNET} has no {missing}: the example changed")
    header = (
        "import numpy as np\n"
        + port("import nvidia.dali.fn as fn\nimport nvidia.dali.types as types\n")
        + port("from nvidia.dali.pipeline import pipeline_def\n")
    )
    out = tmp_path_factory.mktemp("resnet") / "resnet_pipelines.py"
    out.write_text(header + "\n\n".join(found[name] for name in RESNET_FUNCTIONS) + "\n")
    return _import(out, "resnet_pipelines")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet")
    for split, per_class in (("train", 5), ("val", 3)):
        make_dataset(str(root / split), num_classes=2, per_class=per_class, size_range=(48, 96))
    return root


# --- graphs (CPU) ------------------------------------------------------------------------------


@pytest.mark.parametrize("augmentation", ["autoaugment", "trivialaugment", "disabled"])
@pytest.mark.parametrize("dali_device", ["gpu", "cpu"])
def test_efficientnet_graphs(effnet, data, augmentation, dali_device):
    from dlpipe import types

    kw = dict(batch_size=BATCH, num_threads=2, device_id=0, seed=12)
    common = dict(
        interpolation=types.INTERP_LINEAR,
        image_size=SIZE,
        output_layout="CHW",
        automatic_augmentation=augmentation,
        dali_device=dali_device,
    )
    train = effnet.training_pipe(data_dir=str(data / "train"), rank=0, world_size=1, **common, **kw)
    assert len(train._outputs) == 2  # the graph only: building needs a GPU
    proxy = effnet.training_pipe_external_source(**common, **kw)
    assert len(proxy._outputs) == 1
    val = effnet.validation_pipe(
        data_dir=str(data / "val"),
        interpolation=types.INTERP_LINEAR,
        image_size=SIZE + 32,
        image_crop=SIZE,
        output_layout="CHW",
        **kw,
    )
    assert len(val._outputs) == 2


@pytest.mark.parametrize("dali_cpu", [False, True])
def test_resnet50_graphs(resnet, data, dali_cpu):
    pytest.importorskip("torch")
    from dlpipe.plugins.pytorch.experimental import proxy as dali_proxy

    kw = dict(batch_size=BATCH, num_threads=2, device_id=0, seed=12, crop=224, size=256)
    for training in (True, False):
        pipe = resnet.create_dali_pipeline(
            data_dir=str(data / "train"),
            dali_cpu=dali_cpu,
            shard_id=0,
            num_shards=1,
            is_training=training,
            **kw,
        )
        assert len(pipe._outputs) == 2
        server = dali_proxy.DALIServer(
            resnet.create_dali_proxy_pipeline(dali_cpu=dali_cpu, is_training=training, **kw)
        )
        assert list(server.proxy.__signature__.parameters) == ["images"]


# --- one epoch of each (GPU) -------------------------------------------------------------------


def read_filepath(path):
    return np.frombuffer(path.encode(), dtype=np.int8)


def image_folder(root, transform):
    """torchvision's ImageFolder(root, transform=..., loader=read_filepath), or the same."""
    try:
        from torchvision import datasets

        return datasets.ImageFolder(root, transform=transform, loader=read_filepath)
    except ImportError:
        pass
    import torch.utils.data

    classes = sorted(d.name for d in os.scandir(root) if d.is_dir())
    items = [
        (os.path.join(root, c, f), i)
        for i, c in enumerate(classes)
        for f in sorted(os.listdir(os.path.join(root, c)))
    ]

    class Folder(torch.utils.data.Dataset):
        def __len__(self):
            return len(items)

        def __getitem__(self, idx):
            path, label = items[idx]
            return transform(read_filepath(path)), label

    return Folder()


def _check_epoch(batches, n_samples, size):
    import torch

    seen = 0
    for images, labels in batches:
        assert images.is_cuda and images.dtype == torch.float32
        assert tuple(images.shape[1:]) == (3, size, size)
        assert images.shape[0] == labels.shape[0] <= BATCH
        assert set(labels.reshape(-1).tolist()) <= {0, 1}
        seen += images.shape[0]
    assert seen == n_samples


def _dali_batches(loader):
    for (out,) in loader:
        yield out["data"], out["label"]


@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.parametrize("augmentation", ["autoaugment", "trivialaugment", "disabled"])
def test_efficientnet_runs(effnet, data, augmentation):
    pytest.importorskip("cupy")
    from dlpipe import types
    from dlpipe.plugins.pytorch import DALIClassificationIterator
    from dlpipe.plugins.pytorch.experimental import proxy as dali_proxy

    kw = dict(batch_size=BATCH, num_threads=2, device_id=0, seed=12)
    common = dict(
        interpolation=types.INTERP_LINEAR,
        image_size=SIZE,
        output_layout="CHW",
        automatic_augmentation=augmentation,
    )
    pipe = effnet.training_pipe(data_dir=str(data / "train"), **common, **kw)
    loader = DALIClassificationIterator(pipe, reader_name="Reader", fill_last_batch=False)
    _check_epoch(_dali_batches(loader), 10, SIZE)
    val = effnet.validation_pipe(
        data_dir=str(data / "val"),
        interpolation=types.INTERP_LINEAR,
        image_size=SIZE + 32,
        image_crop=SIZE,
        output_layout="CHW",
        **kw,
    )
    loader = DALIClassificationIterator(val, reader_name="Reader", fill_last_batch=False)
    _check_epoch(_dali_batches(loader), 6, SIZE)
    server = dali_proxy.DALIServer(effnet.training_pipe_external_source(**common, **kw))
    dataset = image_folder(str(data / "train"), server.proxy)
    loader = dali_proxy.DataLoader(
        server, dataset, batch_size=BATCH, num_workers=2, pin_memory=True, shuffle=True
    )
    _check_epoch(loader, 10, SIZE)


@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.parametrize("dali_cpu", [False, True])
def test_resnet50_runs(resnet, data, dali_cpu):
    pytest.importorskip("cupy")
    from dlpipe.plugins.pytorch import DALIClassificationIterator, LastBatchPolicy
    from dlpipe.plugins.pytorch.experimental import proxy as dali_proxy

    kw = dict(batch_size=BATCH, num_threads=2, device_id=0, seed=12, crop=224, size=256)
    for split, training, n in (("train", True, 10), ("val", False, 6)):
        pipe = resnet.create_dali_pipeline(
            data_dir=str(data / split),
            dali_cpu=dali_cpu,
            shard_id=0,
            num_shards=1,
            is_training=training,
            **kw,
        )
        pipe.build()
        loader = DALIClassificationIterator(
            pipe, reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True
        )
        for _ in range(2):  # auto_reset: a second epoch
            _check_epoch(_dali_batches(loader), n, 224)
        server = dali_proxy.DALIServer(
            resnet.create_dali_proxy_pipeline(dali_cpu=dali_cpu, is_training=training, **kw)
        )
        dataset = image_folder(str(data / split), server.proxy)
        loader = dali_proxy.DataLoader(
            server,
            dataset,
            batch_size=BATCH,
            shuffle=training,
            num_workers=2,
            pin_memory=True,
            sampler=None,
            collate_fn=None,
        )
        _check_epoch(loader, n, 224)
