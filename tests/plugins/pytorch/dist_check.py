"""Run under ``torchrun --nproc_per_node 2`` (gloo, CPU) by ``test_pytorch_plugin.py``.

Every rank reads its shard of N files (each holds its own id) through ``GenericIterator``;
after each epoch the ranks all_gather their step counts and then their sample ids, and check
that the step counts are equal and that, across ranks, the epoch holds every sample exactly
once (padding copies aside). Prints ``OK`` on rank 0 when every check passed.

Usage: dist_check.py ROOT N BATCH EPOCHS [gloo|nccl]

With ``nccl`` each rank's batches are moved to its GPU inside the pipeline (``.gpu()``) and
reach torch zero-copy through DLPack on ``cuda:<local_rank>``; the gathers run over NCCL.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from dlpipe import Pipeline, fn
from dlpipe.plugins.pytorch import GenericIterator, LastBatchPolicy, distributed_shard


def strip_padding(seq: list[int]) -> list[int]:
    """A shard's epoch is its real samples (distinct) then copies of the last one."""
    seq = list(seq)
    while len(seq) > 1 and seq[-1] == seq[-2]:
        seq.pop()
    return seq


def gather_epoch(it, world: int) -> list[list[int]]:
    """This epoch's ids of every rank (rank order), after checking equal step counts."""
    local = [batch[0]["data"].view(torch.int32).reshape(-1) for batch in it]
    dev = local[0].device
    counts = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world)]
    dist.all_gather(counts, torch.tensor([len(local)], device=dev))
    counts = [int(c) for c in counts]
    if len(set(counts)) != 1:
        raise AssertionError(f"ranks made different numbers of steps: {counts}")
    if counts[0] != len(it):
        raise AssertionError(f"{counts[0]} steps but len(it) == {len(it)}")
    mine = torch.cat(local).to(torch.int64)
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    return [t.tolist() for t in every]


def main() -> None:
    root, n, batch, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    backend = sys.argv[5] if len(sys.argv) > 5 else "gloo"
    shard_id, num_shards, device_id = distributed_shard()
    if backend == "nccl":
        torch.cuda.set_device(device_id)
        dist.init_process_group(backend, device_id=torch.device("cuda", device_id))
    else:
        dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if (shard_id, num_shards) != (rank, world) or device_id != rank:
        raise AssertionError(f"distributed_shard() = {(shard_id, num_shards, device_id)}")

    for policy, pad in ((LastBatchPolicy.FILL, True), (LastBatchPolicy.DROP, False)):
        gpu = backend == "nccl"
        pipe = Pipeline(
            batch_size=batch, num_threads=1, device_id=device_id if gpu else None, seed=11 + rank
        )
        with pipe:
            data, label = fn.readers.file(
                file_root=root,
                shard_id=shard_id,
                num_shards=num_shards,
                random_shuffle=True,
                initial_fill=3,
                pad_last_batch=pad,
                name="Reader",
            )
            pipe.set_outputs(data.gpu() if gpu else data, label)
        it = GenericIterator(
            pipe, ["data", "label"], reader_name="Reader", auto_reset=True, last_batch_policy=policy
        )
        for epoch in range(epochs):
            ranks = gather_epoch(it, world)
            if pad:  # FILL + pad_last_batch: every sample exactly once, padding aside
                real = sorted(x for ids in ranks for x in strip_padding(ids))
                if real != list(range(n)):
                    raise AssertionError(f"epoch {epoch}: samples {real} != 0..{n - 1}")
            else:  # DROP: only full batches, no sample twice
                flat = [x for ids in ranks for x in ids]
                if len(flat) != len(set(flat)) or len(flat) != world * len(it) * batch:
                    raise AssertionError(f"epoch {epoch}: DROP gave {ranks}")
        pipe.close()
    dist.barrier()
    if rank == 0:
        print("OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
