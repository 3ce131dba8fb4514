"""Side by side with NVIDIA DALI: DALI's EfficientNet example (automatic augmentation) and its
resnet50 example in ``dali_proxy`` mode, run unchanged but for imports.

    python3 ci/bench_dali_autoaug.py --examples .ext \
        --only effnet-train-autoaugment,effnet-train-trivialaugment,effnet-val,rn50-proxy

The pipelines come from the examples' own files, read from ``--examples DIR`` (not part of this
repository), with only their imports pointing at dlpipe on the dlpipe side:

* ``dali_effnet_dali.py``: NVIDIA/DALI ``docs/examples/use_cases/pytorch/efficientnet/
  image_classification/dali.py``, whole;
* ``dali_effnet_dataloaders.py``: the DALI loaders of the ``dataloaders.py`` beside it;
* ``dali_resnet50_main_proxy.py``: the imports, pipelines and ``data_prefetcher`` of
  ``docs/examples/use_cases/pytorch/resnet50/main.py`` (the version with ``--data_loader``).

Cells:

* ``effnet-train-autoaugment`` / ``effnet-train-trivialaugment``: the example's
  ``get_dali_train_loader(dali_device="gpu")`` called as its ``main.py`` calls it, with its
  defaults (``--automatic-augmentation``, bicubic, 224, NHWC memory format so the pipeline gives
  "HWC", mixup 0.2 so the labels are one-hot on the GPU) and batch 128 (the readme's benchmark):
  ``training_pipe`` (mixed random-crop decode, resize, flip, AutoAugment's ImageNet policy or
  TrivialAugment Wide on the GPU through conditionals, crop_mirror_normalize), iterated by the
  example's ``DALIWrapper`` over ``DALIClassificationIterator(reader_name="Reader",
  fill_last_batch=False)``.
* ``effnet-val``: ``get_dali_val_loader()`` (mixed decode, resize_shorter 256, crop 224).
* ``rn50-proxy``: the resnet50 example's ``--data_loader dali_proxy`` training loader: its
  ``create_dali_proxy_pipeline`` behind ``dali_proxy.DALIServer``, fed by the proxy's
  ``DataLoader`` whose worker processes list and name the files (see :func:`rn50_proxy`).
* ``cpu-*``: the same programs entirely on the CPU (``device_id=None``). The examples move the
  images to the GPU whatever their CPU option says (``dali_device="cpu"``, ``dali_cpu=True``),
  so these variants drop that ``.gpu()`` and decode on the CPU; they are what runs where no GPU
  is (the local check), and measure the CPU operators.

Data: ``bench_gpu.ensure_dataset``'s photo-like JPEGs (``--data``), of which a subset of
``PER_CLASS`` files per class (symlinks, in ``train/`` and ``val/`` class folders as the
examples expect) keeps a cell near 25 s per library. The environment sets the sizes (both
libraries' children read it): ``DLPIPE_BENCH_PER_CLASS`` (500: 10,000 images an epoch),
``DLPIPE_BENCH_THREADS`` (16: the pipelines' ``num_threads``; the examples' ``--workers``
default of 4 is per GPU of an 8-GPU DGX), ``DLPIPE_BENCH_PROXY_WORKERS`` (8: the proxy's
DataLoader workers and its pipeline's threads, one ``--workers`` in the example), and for the
CPU cells ``DLPIPE_BENCH_CPU_PER_CLASS`` (100), ``DLPIPE_BENCH_CPU_BATCH`` (128),
``DLPIPE_BENCH_CPU_THREADS`` (the cores, at most 16). ``DLPIPE_BENCH_PROXY_DEPTH`` sets the
batches dlpipe's proxy server keeps in flight (an A/B knob).
"""

from __future__ import annotations

import os
import sys
import tempfile
import types as pytypes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dali  # noqa: E402


def _env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


CORES = os.cpu_count() or 1
PER_CLASS = _env("DLPIPE_BENCH_PER_CLASS", 500)  # GPU cells: 20 classes
BATCH = 128  # the readme's benchmark (main.py's default is 64)
THREADS = _env("DLPIPE_BENCH_THREADS", 16)
PROXY_WORKERS = _env("DLPIPE_BENCH_PROXY_WORKERS", 8)
CPU_PER_CLASS = _env("DLPIPE_BENCH_CPU_PER_CLASS", 100)
CPU_BATCH = _env("DLPIPE_BENCH_CPU_BATCH", 128)
CPU_THREADS = _env("DLPIPE_BENCH_CPU_THREADS", min(16, CORES))
CPU_PROXY_WORKERS = min(8, CORES)
IMAGE_SIZE = 224  # main.py: --image-size 224
NUM_CLASSES = 1000  # efficientnet-b0's classifier

# cell -> (pipeline, automatic_augmentation, on the GPU)
CELLS = {
    "effnet-train-autoaugment": ("train", "autoaugment", True),
    "effnet-train-trivialaugment": ("train", "trivialaugment", True),
    "effnet-val": ("val", None, True),
    # a diagnostic: the training pipeline without its automatic augmentation
    "effnet-train-disabled": ("train", "disabled", True),
    "cpu-effnet-train-autoaugment": ("train", "autoaugment", False),
    "cpu-effnet-train-trivialaugment": ("train", "trivialaugment", False),
    "cpu-effnet-val": ("val", None, False),
}

PROXY_CELLS = ("rn50-proxy", "cpu-rn50-proxy")

EFFNET_DEFS = [
    "processing_training_pipe",
    "training_pipe",
    "training_pipe_external_source",
    "processing_validation_pipe",
    "validation_pipe",
    "validation_pipe_external_source",
]
LOADER_DEFS = ["DALIWrapper", "get_dali_train_loader", "get_dali_val_loader", "expand"]


def subset_root(data: str, per_class: int) -> str:
    """Where the cells' subset of ``data`` lives (``train/`` and ``val/`` inside)."""
    return os.path.join(os.path.dirname(os.path.abspath(data)), f"autoaug-{per_class}")


def prepare(args) -> None:
    """The photo-like set, then the subsets (class folders of symlinks) the cells read."""
    from bench_gpu import ensure_dataset

    ensure_dataset(args.data, args.images)
    for per_class in (PER_CLASS, CPU_PER_CLASS):
        root = subset_root(args.data, per_class)
        for split in ("train", "val"):
            bench_dali.ensure_cpu_subset(args.data, os.path.join(root, split), per_class)


# --- the example's files --------------------------------------------------------------------


def cpu_variant(path: str, edits: list[tuple[str, str]]) -> str:
    """A copy of an example's file with ``edits`` (old, new) made, for the ``cpu-*`` cells:
    the examples move images to the GPU (``.gpu()``) whatever their CPU option says."""
    with open(path) as f:
        text = f.read()
    for old, new in edits:
        if old not in text:
            raise RuntimeError(f"{path}: {old!r} not found; the CPU variant needs updating")
        text = text.replace(old, new)
    name = os.path.basename(path).replace(".py", "_cpu.py")
    out = os.path.join(tempfile.mkdtemp(prefix="autoaug-"), name)
    with open(out, "w") as f:
        f.write(text)
    return out


# the EfficientNet example on the CPU: no .gpu(), CPU decoders
EFFNET_CPU_EDITS = [
    ("images = images.gpu()", "images = images"),
    ('device="mixed"', 'device="cpu"'),
]
# the resnet50 example with dali_cpu=True, but crop_mirror_normalize on the CPU too
RN50_CPU_EDITS = [("images.gpu(),", "images,")]


def load_effnet(args, lib: str, cpu: bool) -> tuple[dict, dict]:
    """The example's ``image_classification.dali`` definitions and its DALI loaders
    (``dataloaders.py``), each file's imports rewritten for dlpipe on the dlpipe side. The
    loaders import ``image_classification.dali``: it is registered as that module."""
    path = os.path.join(args.examples, "dali_effnet_dali.py")
    path = cpu_variant(path, EFFNET_CPU_EDITS) if cpu else path
    pipes = bench_dali.load_defs(path, EFFNET_DEFS, lib)
    package = pytypes.ModuleType("image_classification")
    package.__path__ = []  # a package: its other modules (autoaugment, ...) are absent
    module = pytypes.ModuleType("image_classification.dali")
    module.__dict__.update(pipes)
    package.dali = module
    sys.modules["image_classification"] = package
    sys.modules["image_classification.dali"] = module
    loaders = bench_dali.load_defs(
        os.path.join(args.examples, "dali_effnet_dataloaders.py"), LOADER_DEFS, lib
    )
    return pipes, loaders


class CpuWrapper:
    """The example's ``DALIWrapper`` (NHWC output seen as NCHW, labels flattened to int64,
    ``reset`` after each epoch) without its ``.cuda()``: for the CPU cells."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        import torch

        for data in self.loader:
            x = data[0]["data"]
            n, h, w, c = x.shape
            s = x.stride()
            yield (
                torch.as_strided(x, size=(n, c, h, w), stride=(s[0], s[3], s[1], s[2])),
                torch.reshape(data[0]["label"], [-1]).long(),
            )
        self.loader.reset()


def _iterator_class(lib: str):
    if lib == "dali":
        from nvidia.dali.plugin.pytorch import DALIClassificationIterator
    else:
        from dlpipe.plugins.pytorch import DALIClassificationIterator
    return DALIClassificationIterator


def effnet(args) -> None:
    """One EfficientNet cell: the example's loader, consumed as its training loop does."""
    import torch

    kind, augmentation, on_gpu = CELLS[args.cell]
    pipes, loaders = load_effnet(args, args.lib, cpu=not on_gpu)
    if on_gpu:
        root = subset_root(args.data, PER_CLASS)
        common = dict(
            data_path=root,
            image_size=IMAGE_SIZE,
            batch_size=BATCH,
            num_classes=NUM_CLASSES,
            interpolation="bicubic",
            workers=THREADS,
            memory_format=torch.channels_last,
        )
        if kind == "train":
            # main.py: one_hot = mixup > 0 (its default mixup is 0.2)
            get = loaders["get_dali_train_loader"](dali_device="gpu")
            it, _ = get(one_hot=True, augmentation=augmentation, **common)
        else:
            it, _ = loaders["get_dali_val_loader"]()(one_hot=False, **common)
        # the example's DALIWrapper keeps its iterator as ``loader`` (older copies) or
        # ``dalipipeline``
        inner = getattr(it, "loader", None) or it.dalipipeline
        pipe, batch = inner._pipes[0], BATCH
    else:
        root = subset_root(args.data, CPU_PER_CLASS)
        kw = dict(
            interpolation=pipes["types"].INTERP_CUBIC,  # the example's own types import
            output_layout="HWC",
            batch_size=CPU_BATCH,
            num_threads=CPU_THREADS,
            device_id=None,
            seed=12,
        )
        if kind == "train":
            pipe = pipes["training_pipe"](
                data_dir=os.path.join(root, "train"),
                image_size=IMAGE_SIZE,
                automatic_augmentation=augmentation,
                dali_device="cpu",
                **kw,
            )
        else:
            pipe = pipes["validation_pipe"](
                data_dir=os.path.join(root, "val"),
                image_size=IMAGE_SIZE + 32,
                image_crop=IMAGE_SIZE,
                **kw,
            )
        loader = _iterator_class(args.lib)(pipe, reader_name="Reader", fill_last_batch=False)
        it, batch = CpuWrapper(loader), CPU_BATCH

    def use(data):
        x, y = data
        return x.shape[0], x[:, 0, 0, 0].float().sum() + y.float().sum()

    bench_dali.measure(args, pipe, it, use, batch, on_gpu=on_gpu)


# --- the resnet50 example's dali_proxy mode ----------------------------------------------------


class _ImageFolder:
    """``torchvision.datasets.ImageFolder``'s listing (sorted class folders, their sorted
    files, the class index as target), used only where torchvision is absent (the local
    check; the GPU machine has torchvision)."""

    def __init__(self, root, transform=None, loader=None):
        classes = sorted(d.name for d in os.scandir(root) if d.is_dir())
        self.samples = [
            (os.path.join(root, c, f), i)
            for i, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))
            if f.lower().endswith((".jpg", ".jpeg"))
        ]
        self.transform, self.loader = transform, loader

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, index):
        path, target = self.samples[index]
        return self.transform(self.loader(path)), target


class _ServedEpochs:
    """What :func:`bench_dali.measure` loops over, once per epoch: the example's training
    loop, ``data_prefetcher(train_loader, do_normalize=False)`` over the proxy's DataLoader
    (on the CPU, the DataLoader itself: the prefetcher needs CUDA)."""

    def __init__(self, loader, prefetcher):
        self.loader, self.prefetcher = loader, prefetcher

    def __iter__(self):
        if self.prefetcher is None:
            return iter(self.loader)
        return iter(self.prefetcher(self.loader, do_normalize=False))


class _ServedPipe:
    """The pipeline as :func:`bench_dali.measure` sees it: ``stats()`` from the pipeline;
    ``close()`` leaves the server's context (as the example's ``with train_loader_ctx``
    does) before closing the pipeline."""

    def __init__(self, pipe, server):
        self.pipe, self.server = pipe, server

    def stats(self):
        return self.pipe.stats()

    def trace(self, path):
        return self.pipe.trace(path)

    def close(self):
        self.server.__exit__(None, None, None)
        if hasattr(self.pipe, "close"):
            self.pipe.close()


def rn50_proxy(args) -> None:
    """DALI's resnet50 example with ``--data_loader dali_proxy``, training: its
    ``create_dali_proxy_pipeline`` (external source of file names, file read, random-crop
    decode, resize, crop_mirror_normalize) behind ``dali_proxy.DALIServer``, an
    ``ImageFolder`` whose transform is the server's proxy and whose loader encodes the path,
    and ``dali_proxy.DataLoader`` with ``--workers`` worker processes, as ``main()`` builds
    them; consumed through ``data_prefetcher`` as ``train()`` does."""
    on_gpu = args.cell == "rn50-proxy"
    if not on_gpu:
        import torch

        if not torch.cuda.is_available():  # DALI's proxy marks its steps with torch's NVTX,
            for name in ("range_push", "range_pop"):  # which a CPU-only torch lacks
                setattr(torch.cuda.nvtx, name, lambda *a, **k: None)
    path = os.path.join(args.examples, "dali_resnet50_main_proxy.py")
    if not on_gpu:
        path = cpu_variant(path, RN50_CPU_EDITS)
    ns = bench_dali.load_defs(
        path, ["image_processing_func", "create_dali_proxy_pipeline", "data_prefetcher"], args.lib
    )
    dali_proxy, np = ns["dali_proxy"], ns["np"]
    image_folder = ns["datasets"].ImageFolder if "datasets" in ns else _ImageFolder
    root = subset_root(args.data, PER_CLASS if on_gpu else CPU_PER_CLASS)
    batch = BATCH if on_gpu else CPU_BATCH
    workers = PROXY_WORKERS if on_gpu else CPU_PROXY_WORKERS

    def read_filepath(path):  # main()'s own
        return np.frombuffer(path.encode(), dtype=np.int8)

    train_pipe = ns["create_dali_proxy_pipeline"](
        batch_size=batch,
        num_threads=workers,
        device_id=0 if on_gpu else None,
        seed=12,
        crop=224,
        size=256,
        dali_cpu=not on_gpu,
        is_training=True,
    )
    server = dali_proxy.DALIServer(train_pipe)
    depth = os.environ.get("DLPIPE_BENCH_PROXY_DEPTH")  # A/B: the batches the server keeps fed
    if depth and args.lib == "dlpipe":
        server._depth = lambda: int(depth)
    dataset = image_folder(
        os.path.join(root, "train"), transform=server.proxy, loader=read_filepath
    )
    loader = dali_proxy.DataLoader(
        server,
        dataset,
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        pin_memory=on_gpu,  # the example's True; without CUDA torch only warns
        sampler=None,
        collate_fn=None,
    )
    server.__enter__()  # main(): with train_loader_ctx, val_loader_ctx: ...
    it = _ServedEpochs(loader, ns["data_prefetcher"] if on_gpu else None)

    def use(data):
        x, y = data
        return x.shape[0], x[:, 0, 0, 0].float().sum() + y.float().sum()

    bench_dali.measure(args, _ServedPipe(train_pipe, server), it, use, batch, on_gpu=on_gpu)


def child(args) -> None:
    if args.cell in CELLS:
        return effnet(args)
    if args.cell in PROXY_CELLS:
        return rn50_proxy(args)
    raise SystemExit(f"unknown cell {args.cell!r}")


SUITE = bench_dali.Suite(
    script=os.path.abspath(__file__),
    cells=list(CELLS) + list(PROXY_CELLS),
    child=child,
    prepare=prepare,
    description=__doc__.split("\n")[0],
    example_cells=frozenset(CELLS) | frozenset(PROXY_CELLS),
    # the examples take their shard from torch.distributed, which these children don't start
    single_gpu_cells=frozenset(CELLS) | frozenset(PROXY_CELLS),
)

if __name__ == "__main__":
    bench_dali.main(SUITE)
