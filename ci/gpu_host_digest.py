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


def record(log: list) -> None:
    """Append each upload's bytes and each launch's description to ``log``."""
    set_ = cupy.ndarray.set
    call = cupy._Kernel.__call__

    def upload(self, host, stream=None):
        log.append(np.ascontiguousarray(host).tobytes())
        return set_(self, host, stream)

    def arg(a):
        if isinstance(a, cupy.ndarray):
            return ("device", a.shape, str(a.dtype), a.data.ptr)
        return repr(a)

    def launch(self, grid, block, args, shared_mem=0, stream=None):
        log.append(repr((self.name, grid, block, [arg(a) for a in args], shared_mem)).encode())
        return call(self, grid, block, args, shared_mem, stream)

    runtime = cupy.cuda.runtime
    memcpy = runtime.memcpyAsync

    def memcpy_upload(dst, src, size, kind, stream):  # (kernels.upload: the same bytes)
        if kind == runtime.memcpyHostToDevice:
            log.append(ctypes.string_at(src, size))
        return memcpy(dst, src, size, kind, stream)

    cupy.ndarray.set = upload
    runtime.memcpyAsync = memcpy_upload
    cupy._Kernel.__call__ = launch


def main() -> None:
    from gpu_host_model import build, build_nemo, build_speech

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
    if args.graph == "speech":  # DLE's Jasper GPU part, its batch of 32 unless told
        pipe = build_speech(args.aug == "train", 32 if args.batch == 64 else args.batch)
    elif args.graph == "nemo":  # NeMo's GPU part (one graph for both splits)
        pipe = build_nemo(32 if args.batch == 64 else args.batch)
        args.aug = "nemo"
    else:
        pipe = build(args.aug, args.batch, args.resize)
    for _ in range(args.iters):
        pipe.run()
    digest = hashlib.sha256(b"".join(log)).hexdigest()
    print(f"{args.aug}: {len(log)} uploads and launches, {sum(map(len, log))} bytes, {digest}")


if __name__ == "__main__":
    main()
