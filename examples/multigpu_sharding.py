"""Multi-GPU sharding walkthrough: one pipeline per GPU, each reading its own shard of the data.

DALI's "Using multiple GPUs" tutorial with dlpipe: the data set is cut into ``num_shards``
contiguous shards (shard i holds files ``[floor(N*i/S), floor(N*(i+1)/S))`` of the reader's
list, after its one global shuffle); pipeline i reads shard i (``shard_id=i``) on GPU i
(``device_id=i``). Each pipeline's first batch is saved as a picture, then one epoch is read
from every shard to show that the shards do not overlap and together cover the data set.

    python examples/multigpu_sharding.py --device cpu             # no GPU needed
    python examples/multigpu_sharding.py --device gpu --data /data/train --shards 2

On CPU the pipelines run with ``device_id=None`` (no CUDA at all). On GPU, pipeline i uses
GPU ``i % number of GPUs`` and decodes with ``device="mixed"`` (nvImageCodec), so two
pipelines share one GPU on a single-GPU machine.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile

from dlpipe import fn, pipeline_def
from dlpipe.synthetic import make_dataset
from dlpipe.visualize import show_images


@pipeline_def
def sharded_pipeline(root: str, shard_id: int, num_shards: int, decode_device: str, size: int):
    jpegs, labels = fn.readers.file(
        file_root=root,
        random_shuffle=True,  # one global shuffle (same on every rank), then sharding
        shard_id=shard_id,
        num_shards=num_shards,
        pad_last_batch=True,  # every shard yields ceil(N / num_shards) samples per epoch
        name="Reader",
    )
    images = fn.decoders.image(jpegs, device=decode_device)  # "mixed": decoded on the GPU
    images = fn.resize(images, size=(size, size))  # on the GPU after a mixed decode
    return images, labels


def gpu_count() -> int:
    import cupy  # only for --device gpu

    return cupy.cuda.runtime.getDeviceCount()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="a folder of class subfolders (default: a synthetic one)")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--shards", type=int, default=2, help="pipelines / shards / GPUs")
    parser.add_argument("--batch-size", type=int, default=8, help="per pipeline")
    parser.add_argument("--size", type=int, default=128, help="image side after resize")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per pipeline")
    parser.add_argument(
        "--steps", type=int, default=0, help="batches to read per shard (0: one whole epoch)"
    )
    parser.add_argument("--out", default=".", help="where to write shard_<i>.png")
    args = parser.parse_args(argv)

    root = args.data or make_dataset(
        os.path.join(tempfile.gettempdir(), "dlpipe_sharding_example"),
        num_classes=4,
        per_class=9,
        size_range=(64, 128),
    )
    gpus = gpu_count() if args.device == "gpu" else 0
    pipes = [
        sharded_pipeline(
            root,
            shard_id=i,
            num_shards=args.shards,
            decode_device="mixed" if gpus else "cpu",
            size=args.size,
            batch_size=args.batch_size,
            num_threads=args.threads,
            device_id=i % gpus if gpus else None,
            seed=1234 + i,
        )
        for i in range(args.shards)
    ]
    for p in pipes:
        p.build()
    meta = pipes[0].reader_meta("Reader")
    n, per_shard = meta["epoch_size"], meta["epoch_size_padded"] // args.shards
    batches = args.steps or math.ceil(per_shard / args.batch_size)
    print(
        f"{n} files in {root}; {args.shards} shards of {per_shard} samples (padded); "
        f"{batches} batches of {args.batch_size} per shard; device {args.device}"
        + (f" ({gpus} GPU(s))" if gpus else "")
    )

    os.makedirs(args.out, exist_ok=True)
    seen: list[list[str]] = []
    for i, pipe in enumerate(pipes):
        files: list[str] = []
        for step in range(batches):
            images, labels = pipe.run()
            files += [labels.source_info(k) for k in range(len(labels))]
            if step == 0:
                path = os.path.join(args.out, f"shard_{i}.png")
                # GPU batches are copied to the host; at most 16 pictures
                show_images(images, path, columns=4, max_images=16)
                first = labels.as_array().ravel().tolist()
                more = " ..." if len(first) > 8 else ""
                print(f"shard {i}: first batch labels {first[:8]}{more} -> {path}")
        pipe.close()
        seen.append(files)

    distinct = [set(f) for f in seen]
    overlap = set.intersection(*distinct) if len(distinct) > 1 else set()
    covered = set.union(*distinct)
    for i, files in enumerate(seen):
        print(
            f"shard {i}: read {len(files)} samples, {len(distinct[i])} distinct files, "
            f"{len(files) - len(distinct[i])} repeats (padding of the last batch)"
        )
    print(f"files in more than one shard: {len(overlap)}; files covered: {len(covered)} of {n}")
    return {"files": seen, "num_files": n, "overlap": len(overlap), "covered": len(covered)}


if __name__ == "__main__":
    main()
