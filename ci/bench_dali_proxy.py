"""Side by side with NVIDIA DALI: a pipeline behind a PyTorch DataLoader, through DALI's proxy
(``nvidia.dali.plugin.pytorch.experimental.proxy``), as its documentation writes it.

    python3 ci/bench_dali_proxy.py [--only proxy-rn50] [--rounds 2] [--epochs 3]

Cells:

* ``proxy-rn50``: ``DALIServer``'s "Example 1" (DALI 2.4's docstring, the ``dali_proxy`` mode of
  its resnet50 example): ``torchvision.datasets.ImageFolder`` whose loader hands each file's
  path to the DataLoader's 8 worker processes and whose transform is the server's proxy; the
  pipeline reads the files (``fn.io.file.read``), decodes a random crop on the GPU, resizes to
  224 and normalises with a random mirror; batch 128, 8 threads, ``prefetch_queue_depth`` twice
  the workers, as the example sets it. The training loop takes ``(images, labels)`` from the
  proxy's ``DataLoader``.

``proxy-rn50-cpu`` (run only when named): the same on the CPU, batch 16, 2 threads, 2 workers,
to check the cell on a machine without a GPU.

The data: the classification harness's photo-like JPEGs (``bench_dali.py``'s ``--data``).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_dali  # noqa: E402

# name -> (batch, pipeline threads, DataLoader workers, on the GPU)
CELLS = {"proxy-rn50": (128, 8, 8, True), "proxy-rn50-cpu": (16, 2, 2, False)}


def child(args) -> None:
    import numpy as np
    import torch
    import torchvision

    batch, threads, workers, gpu = CELLS[args.cell]
    if args.lib == "dali":
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch.experimental import proxy as dali_proxy
    else:
        from dlpipe import fn, pipeline_def, types
        from dlpipe.plugins.pytorch.experimental import proxy as dali_proxy

    @pipeline_def
    def rn50_train_pipe():
        rng = fn.random.coin_flip(probability=0.5)
        filepaths = fn.external_source(name="images", no_copy=True)
        jpegs = fn.io.file.read(filepaths)
        images = fn.decoders.image_random_crop(
            jpegs,
            device="mixed" if gpu else "cpu",
            output_type=types.RGB,
            random_aspect_ratio=[0.75, 4.0 / 3.0],
            random_area=[0.08, 1.0],
        )
        images = fn.resize(
            images, size=[224, 224], interp_type=types.INTERP_LINEAR, antialias=False
        )
        return fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="CHW",
            crop=(224, 224),
            mean=bench_dali.MEAN,
            std=bench_dali.STD,
            mirror=rng,
        )

    def read_filepath(path):
        return np.frombuffer(path.encode(), dtype=np.int8)

    pipe = rn50_train_pipe(
        batch_size=batch,
        num_threads=threads,
        device_id=0 if gpu else None,
        prefetch_queue_depth=2 * workers,
    )
    with dali_proxy.DALIServer(pipe) as dali_server:
        dataset = torchvision.datasets.ImageFolder(
            args.data, transform=dali_server.proxy, loader=read_filepath
        )
        loader = dali_proxy.DataLoader(
            dali_server, dataset, batch_size=batch, num_workers=workers, drop_last=True
        )

        def use(data):
            x, y = data
            assert x.shape[1:] == (3, 224, 224) and x.is_cuda == gpu, (x.shape, x.device)
            return x.shape[0], x.view(x.shape[0], -1)[:, 0].sum() + y.to(x.device).sum()

        bench_dali.measure(args, pipe, loader, use, batch, on_gpu=gpu)
        del loader
    if gpu:
        torch.cuda.synchronize()


def prepare(args) -> None:
    from bench_gpu import ensure_dataset

    ensure_dataset(args.data, args.images)


SUITE = bench_dali.Suite(
    script=__file__,
    cells=["proxy-rn50"],
    child=child,
    prepare=prepare,
    description=__doc__.split("\n")[0],
    single_gpu_cells=frozenset(CELLS),
)

if __name__ == "__main__":
    bench_dali.main(SUITE)
