"""Train a tiny CNN with plain JAX (and optax, if installed) on batches from dlpipe.

A synthetic 4-class JPEG dataset is written once (``dlpipe.synthetic.make_dataset``); the
pipeline reads, decodes, resizes to 32x32, flips at random and normalizes. With several JAX
devices the global batch is split over them (one pipeline per device, ``NamedSharding``) and
``jit`` runs data-parallel; with one device it is a plain single-device loop.

    python examples/jax_train.py --steps 50
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python examples/jax_train.py  # 4 CPU devices

Under ``jax.distributed`` (several hosts), call ``jax.distributed.initialize()`` first: each
process then builds the pipelines of its own devices and gets its part of the global batch.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dlpipe import fn, types
from dlpipe.plugins.jax import data_iterator
from dlpipe.synthetic import make_dataset

try:
    import optax
except ImportError:  # plain SGD below
    optax = None

NUM_CLASSES = 4


def images_pipeline(root: str, shard_id: int = 0, num_shards: int = 1):
    """Read -> decode -> resize to 32x32 -> random flip + normalize to [-1, 1] (HWC float)."""
    jpegs, labels = fn.readers.file(
        file_root=root,
        shard_id=shard_id,
        num_shards=num_shards,
        random_shuffle=True,
        pad_last_batch=True,
        name="Reader",
    )
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    images = fn.resize(images, size=(32, 32))
    images = fn.crop_mirror_normalize(
        images,
        dtype=types.FLOAT,
        output_layout="HWC",
        mean=[127.5] * 3,
        std=[127.5] * 3,
        mirror=fn.random.coin_flip(),
    )
    return images, labels


def init_params(seed: int = 0) -> dict:
    """He-initialized weights, made with numpy (no XLA compilation per tiny init op)."""
    rng = np.random.default_rng(seed)

    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    zeros = np.zeros
    return {
        "conv1": he((3, 3, 3, 16), 27),
        "b1": zeros(16, np.float32),
        "conv2": he((3, 3, 16, 32), 144),
        "b2": zeros(32, np.float32),
        "dense": he((32, NUM_CLASSES), 32),
        "b3": zeros(NUM_CLASSES, np.float32),
    }


def model(params: dict, x):
    """(N, 32, 32, 3) -> (N, classes): two stride-2 3x3 convolutions, global mean pool, dense."""
    dims = ("NHWC", "HWIO", "NHWC")
    for w, b in (("conv1", "b1"), ("conv2", "b2")):
        x = jax.lax.conv_general_dilated(x, params[w], (2, 2), "SAME", dimension_numbers=dims)
        x = jax.nn.relu(x + params[b])
    return x.mean(axis=(1, 2)) @ params["dense"] + params["b3"]


def loss_fn(params, images, labels, mask):
    logits = model(params, images)
    logp = jax.nn.log_softmax(logits)
    nll = -jnp.take_along_axis(logp, labels[:, None], axis=1)[:, 0]
    weight = mask.astype(jnp.float32)  # padding rows (PARTIAL) do not count
    return (nll * weight).sum() / jnp.maximum(weight.sum(), 1.0)


def make_train_step(lr: float):
    if optax is not None:
        opt = optax.adam(lr)

        @jax.jit
        def step(params, opt_state, images, labels, mask):
            loss, grads = jax.value_and_grad(loss_fn)(params, images, labels, mask)
            updates, opt_state = opt.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        return jax.jit(opt.init), step

    @jax.jit
    def sgd_step(params, opt_state, images, labels, mask):
        loss, grads = jax.value_and_grad(loss_fn)(params, images, labels, mask)
        return jax.tree.map(lambda p, g: p - lr * 10 * g, params, grads), opt_state, loss

    return (lambda params: ()), sgd_step


def main(argv=None) -> list[float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100, help="training steps")
    parser.add_argument("--batch-size", type=int, default=32, help="global batch size")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--per-class", type=int, default=32, help="synthetic images per class")
    parser.add_argument(
        "--data",
        default=os.path.join(tempfile.gettempdir(), "dlpipe_jax_example"),
        help="dataset folder (written once if missing)",
    )
    parser.add_argument("--threads", type=int, default=2, help="CPU threads per pipeline")
    args = parser.parse_args(argv)

    root = make_dataset(
        os.path.join(args.data, f"{NUM_CLASSES}x{args.per_class}"),
        num_classes=NUM_CLASSES,
        per_class=args.per_class,
        size_range=(48, 96),
    )
    devices = jax.devices()
    if len(devices) > 1:
        mesh = Mesh(np.array(devices), ("batch",))
        sharding = NamedSharding(mesh, PartitionSpec("batch"))
        replicated = NamedSharding(mesh, PartitionSpec())
    else:
        sharding = replicated = None
    make_iterator = data_iterator(
        images_pipeline,
        output_map=["images", "labels", "is_nonpadding"],
        reader_name="Reader",
        auto_reset=True,
        sharding=sharding,
    )
    it = make_iterator(root, batch_size=args.batch_size, num_threads=args.threads, seed=0)
    print(
        f"{len(devices)} {devices[0].platform} device(s), global batch {args.batch_size}, "
        f"{len(it)} steps per epoch, optimizer: {'optax.adam' if optax else 'SGD'}"
    )

    params = jax.device_put(init_params(0), replicated)  # None: the default device
    opt_init, train_step = make_train_step(args.lr)
    opt_state = opt_init(params)
    losses: list[float] = []
    step = 0
    while step < args.steps:
        for batch in it:
            labels = batch["labels"].reshape(-1)
            params, opt_state, loss = train_step(
                params, opt_state, batch["images"], labels, batch["is_nonpadding"]
            )
            losses.append(float(loss))
            step += 1
            if step % 10 == 0 or step == 1 or step == args.steps:
                print(f"step {step:4d}  loss {losses[-1]:.4f}")
            if step >= args.steps:
                break
    return losses


if __name__ == "__main__":
    main()
