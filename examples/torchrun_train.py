"""Data-parallel training of a small ResNet on dlpipe batches, one pipeline per process.

Launch with torchrun; each process reads its own shard (``shard_id=rank``,
``num_shards=world_size``) on its own device (``device_id=local_rank``)::

    torchrun --standalone --nproc_per_node 2 examples/torchrun_train.py --device cpu --epochs 2
    torchrun --standalone --nproc_per_node 8 examples/torchrun_train.py --device gpu \\
        --data /data/imagenet/train --batch-size 256 --image-size 224

``--device cpu`` uses the gloo backend and CPU decoding; ``--device gpu`` uses NCCL and decodes
on the GPU (``device="mixed"``). Without ``--data``, a small synthetic JPEG data set is written
first (``dlpipe.synthetic.make_dataset``).

Every rank makes the same number of steps per epoch, so DistributedDataParallel never waits on a
rank that ran out of data: the reader pads each shard to ``ceil(N / world_size)`` samples
(``pad_last_batch=True``) and the iterator sizes epochs from the reader (``reader_name``).
Across ranks an epoch then covers every sample once, plus a few padding copies.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dlpipe import fn, pipeline_def, types
from dlpipe.plugins.pytorch import DALIClassificationIterator, LastBatchPolicy, distributed_shard
from dlpipe.synthetic import make_dataset

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


# --- the model -----------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (ResNet-18/34 block)."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class SmallResNet(nn.Module):
    """A ResNet with one basic block per stage (widths 32, 64, 128, 256)."""

    def __init__(self, num_classes: int, widths=(32, 64, 128, 256)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
        )
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(BasicBlock(cin, w, stride=1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --- the data ------------------------------------------------------------------------------------


@pipeline_def
def train_pipeline(root: str, shard_id: int, num_shards: int, image_size: int, decode: str):
    jpegs, labels = fn.readers.file(
        file_root=root,
        shard_id=shard_id,
        num_shards=num_shards,
        random_shuffle=True,
        pad_last_batch=True,
        name="Reader",
    )
    images = fn.decoders.image(jpegs, device=decode, output_type=types.RGB)
    images = fn.resize(images, resize_shorter=int(image_size * 1.15))
    images = fn.crop_mirror_normalize(
        images,
        crop=(image_size, image_size),
        mean=MEAN,
        std=STD,
        mirror=fn.random.coin_flip(probability=0.5),
        dtype=types.FLOAT,
        output_layout="CHW",
    )
    return images, labels


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="class-per-folder JPEG root (default: a synthetic data set)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: no cap)")
    p.add_argument("--batch-size", type=int, default=32, help="per process")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--num-threads", type=int, default=2, help="dlpipe CPU threads per process")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--synthetic-classes", type=int, default=4)
    p.add_argument("--synthetic-per-class", type=int, default=64)
    return p.parse_args(argv)


def synthetic_root(args, local_rank: int) -> str:
    root = os.path.join(
        tempfile.gettempdir(),
        f"dlpipe_torchrun_{args.synthetic_classes}x{args.synthetic_per_class}",
    )
    if local_rank == 0:  # one writer per machine, the others wait at the barrier
        make_dataset(
            root,
            num_classes=args.synthetic_classes,
            per_class=args.synthetic_per_class,
            size_range=(96, 160),
            seed=args.seed,
        )
    dist.barrier()
    return root


def main(argv=None) -> None:
    args = parse_args(argv)
    gpu = args.device == "gpu"
    if gpu and not torch.cuda.is_available():
        raise SystemExit("--device gpu needs CUDA")
    shard_id, num_shards, local_rank = distributed_shard()
    if gpu:
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert (rank, world) == (shard_id, num_shards)
    torch.manual_seed(args.seed)

    root = args.data or synthetic_root(args, local_rank)
    num_classes = sum(os.path.isdir(os.path.join(root, d)) for d in os.listdir(root))
    pipe = train_pipeline(
        root,
        shard_id,
        num_shards,
        args.image_size,
        "mixed" if gpu else "cpu",
        batch_size=args.batch_size,
        num_threads=args.num_threads,
        device_id=local_rank if gpu else None,
        seed=args.seed + rank,
    )
    loader = DALIClassificationIterator(
        pipe, reader_name="Reader", auto_reset=True, last_batch_policy=LastBatchPolicy.FILL
    )

    device = torch.device("cuda", local_rank) if gpu else torch.device("cpu")
    model = SmallResNet(num_classes).to(device)
    model = DistributedDataParallel(model, device_ids=[local_rank] if gpu else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    if rank == 0:
        print(
            f"{world} processes, {len(loader)} steps per epoch, batch {args.batch_size} per "
            f"process, {num_classes} classes, data {root}",
            flush=True,
        )

    total = 0
    for epoch in range(args.epochs):
        steps, seen, loss_sum, start = 0, 0, torch.zeros((), device=device), time.perf_counter()
        for batch in loader:
            images = batch[0]["data"]
            labels = batch[0]["label"].squeeze(-1).long().to(device, non_blocking=True)
            loss = F.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
            steps += 1
            seen += images.shape[0]
            total += 1
            if args.steps and total >= args.steps:
                break
        elapsed = time.perf_counter() - start
        counts = [None] * world
        dist.all_gather_object(counts, steps)
        rate = torch.tensor([seen / elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(rate)
        if rank == 0:
            print(
                f"epoch {epoch}: steps per rank {counts}, loss {loss_sum.item() / steps:.4f}, "
                f"{rate.item():.1f} img/s",
                flush=True,
            )
        if args.steps and total >= args.steps:
            break
    dist.barrier()
    # Shut down in order: the pipeline's threads, then the DDP model (its reducer holds the
    # process group), then the process group. Leaving the model to interpreter exit let the
    # process abort there now and then ("terminate called without an active exception").
    pipe.close()
    del loader, model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
