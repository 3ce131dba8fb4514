"""Train a small Keras model under ``tf.distribute.MirroredStrategy`` fed by dlpipe.

One pipeline per replica: ``distribute_datasets_from_function`` calls ``dataset_fn`` once per
input pipeline (``InputReplicationMode.PER_REPLICA``), and each pipeline reads its own shard
(``shard_id=ctx.input_pipeline_id``, ``num_shards=ctx.num_input_pipelines``). Runs on a
CPU-only machine: the two replicas are two logical CPU devices. On GPUs, list the GPUs instead,
create each dataset under ``tf.device(f"/gpu:{ctx.input_pipeline_id}")`` and give the pipeline
``device_id=ctx.input_pipeline_id`` and GPU operators (``device="mixed"`` decoding).

    python examples/tf_distribute.py [--data DIR] [--steps 4] [--epochs 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="image folder (default: a synthetic one)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8, help="global batch size")
    parser.add_argument("--size", type=int, default=32, help="image side after resize")
    parser.add_argument("--steps", type=int, default=4, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)

    import tensorflow as tf

    # Logical devices can only be set before TensorFlow initializes its runtime.
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas
        )
    except RuntimeError:
        pass  # already initialized (e.g. called from a test): use the devices there are
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][: args.replicas]
    if len(devices) < args.replicas:
        raise SystemExit(f"--replicas={args.replicas}, but TensorFlow has {len(devices)} CPUs")

    from dlpipe import fn, pipeline_def, types
    from dlpipe.plugins.tf import DLPipeDataset
    from dlpipe.synthetic import make_dataset

    root = args.data or make_dataset(
        os.path.join(tempfile.gettempdir(), "dlpipe_tf_example"),
        num_classes=4,
        per_class=16,
        size_range=(48, 96),
    )

    @pipeline_def(num_threads=2, device_id=None, seed=42)
    def train_pipe(shard_id: int, num_shards: int):
        jpegs, labels = fn.readers.file(
            file_root=root,
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=True,
            pad_last_batch=True,
            name="Reader",
        )
        images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, size=(args.size, args.size))
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT,
            output_layout="HWC",
            mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
            std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return images, labels

    strategy = tf.distribute.MirroredStrategy(devices)
    print(f"replicas in sync: {strategy.num_replicas_in_sync}")

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        pipe = train_pipe(
            shard_id=ctx.input_pipeline_id,
            num_shards=ctx.num_input_pipelines,
            batch_size=ctx.get_per_replica_batch_size(args.batch_size),
        )
        # FILL: every replica makes the same number of steps per epoch.
        return DLPipeDataset(pipe, reader_name="Reader").repeat()

    options = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_fetch_to_device=False,
    )
    dist = strategy.distribute_datasets_from_function(dataset_fn, options)

    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input((args.size, args.size, 3)),
                tf.keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                tf.keras.layers.GlobalAveragePooling2D(),
                tf.keras.layers.Dense(4),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.SGD(0.05),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    history = model.fit(dist, epochs=args.epochs, steps_per_epoch=args.steps, verbose=2)
    loss = float(history.history["loss"][-1])
    print(f"final loss: {loss:.4f}")
    return loss


if __name__ == "__main__":
    main()
