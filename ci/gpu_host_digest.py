"""A digest of everything the GPU stage hands the GPU, without a GPU: every host-to-device upload
(descriptor tables, parameters, with their device pointers) and every kernel launch (name, grid,
block, arguments) of ``ci/gpu_host_model.py``'s pipelines, run against the stand-in CuPy
(``ci/fake_cupy``).

    python3 ci/gpu_host_digest.py --aug autoaugment --iters 4 [--resize]
    python3 ci/gpu_host_digest.py --graph speech --aug val
    python3 ci/gpu_host_digest.py --graph nemo

Two checkouts that print the same digest give the kernels the same inputs, batch after batch
(the stand-in's addresses are deterministic): a host-side refactoring that keeps the digest
keeps the GPU results. Run the other checkout's dlpipe with ``PYTHONPATH`` pointing at a
directory whose ``dlpipe`` is that checkout's ``core``.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_cupy"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402 (the stand-in)
import numpy as np  # noqa: E402


def log_launches(log: list, describe) -> None:
    """Append ``repr(describe(kernel, grid, block, args, shared_mem))`` to ``log`` at each kernel
    launch (this digest's and ``gpu_host_semdigest.py``'s)."""
    call = cupy._Kernel.__call__

    def launch(self, grid, block, args, shared_mem=0, stream=None):
        log.append(repr(describe(self, grid, block, args, shared_mem)).encode())
        return call(self, grid, block, args, shared_mem, stream)

    cupy._Kernel.__call__ = launch


def build_graph(graph: str, aug: str, batch: int, resize: bool = False):
    """``ci/gpu_host_model.py``'s pipeline for ``--graph``/``--aug`` and the label to print."""
    from gpu_host_model import build, build_nemo, build_speech

    if graph == "speech":  # DLE's Jasper GPU part
        return build_speech(aug == "train", batch), aug
    if graph == "nemo":  # NeMo's GPU part (one graph for both splits)
        return build_nemo(batch), "nemo"
    return build(aug, batch, resize), aug


def record(log: list) -> None:
    """Append each upload's bytes and each launch's description to ``log``."""
    set_ = cupy.ndarray.set

    def upload(self, host, stream=None):
        log.append(np.ascontiguousarray(host).tobytes())
        return set_(self, host, stream)

    def arg(a):
        if isinstance(a, cupy.ndarray):
            return ("device", a.shape, str(a.dtype), a.data.ptr)
        return repr(a)

    runtime = cupy.cuda.runtime
    memcpy = runtime.memcpyAsync

    def memcpy_upload(dst, src, size, kind, stream):  # (kernels.upload: the same bytes)
        if kind == runtime.memcpyHostToDevice:
            log.append(ctypes.string_at(src, size))
        return memcpy(dst, src, size, kind, stream)

    cupy.ndarray.set = upload
    runtime.memcpyAsync = memcpy_upload
    log_launches(
        log, lambda k, grid, block, args, shm: (k.name, grid, block, [arg(a) for a in args], shm)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", choices=["efficientnet", "speech", "nemo"], default="efficientnet")
    ap.add_argument("--aug", choices=["autoaugment", "trivialaugment", "train", "val"],
                    default="autoaugment", help="efficientnet: the policy; speech: the split")  # fmt: skip
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--resize", action="store_true",
                    help="efficientnet: start at the resize, of ragged images")  # fmt: skip
    args = ap.parse_args()
    log: list[bytes] = []
    record(log)
    speech = args.graph != "efficientnet" and args.batch == 64  # (speech: 32 unless told)
    pipe, label = build_graph(args.graph, args.aug, 32 if speech else args.batch, args.resize)
    for _ in range(args.iters):
        pipe.run()
    digest = hashlib.sha256(b"".join(log)).hexdigest()
    print(f"{label}: {len(log)} uploads and launches, {sum(map(len, log))} bytes, {digest}")


if __name__ == "__main__":
    main()
