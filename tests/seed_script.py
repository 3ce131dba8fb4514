"""The seed script's pipeline: a DALI multi-GPU ImageNet loader from a Korean blog post, with
only its imports changed (``nvidia.dali`` -> ``dlpipe``). It ends ``return images, labels[0]``.
Imported by tests/core/test_graph_api.py (CPU) and tests/gpu/test_arithmetic_gpu.py (GPU)."""

from __future__ import annotations

from dlpipe import fn, types
from dlpipe.pipeline import pipeline_def


@pipeline_def
def create_dali_pipeline(data_dir, crop, size, shard_id, num_shards, dali_cpu=False,
                         is_training=True):  # fmt: skip
    images, labels = fn.readers.file(
        file_root=data_dir,
        shard_id=shard_id,
        num_shards=num_shards,
        random_shuffle=is_training,
        pad_last_batch=True,
        name="Reader",
    )
    dali_device = "cpu" if dali_cpu else "gpu"
    decoder_device = "cpu" if dali_cpu else "mixed"
    images = fn.decoders.image(images, device=decoder_device, output_type=types.RGB)
    images = fn.resize(
        images,
        device=dali_device,
        size=size,
        mode="not_smaller",
        interp_type=types.INTERP_TRIANGULAR,
    )
    mirror = fn.random.coin_flip(probability=0.5) if is_training else False
    images = fn.crop_mirror_normalize(
        images,
        dtype=types.FLOAT,
        output_layout="CHW",
        crop=(crop, crop),
        mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
        mirror=mirror,
    )
    if not dali_cpu:
        labels = labels.gpu()
    return images, labels[0]
