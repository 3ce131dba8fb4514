"""A digest of what every kernel launch of ``ci/gpu_host_model.py``'s speech pipelines reads,
with device addresses named by the allocation they point into, for host-side changes that
allocate or upload differently (descriptor tables packed into one upload, pointer arguments
passed as integers) but must hand the kernels the same work.

    python3 ci/gpu_host_semdigest.py --graph nemo
    python3 ci/gpu_host_semdigest.py --graph speech --aug val
    python3 ci/gpu_host_semdigest.py --graph nemo --first-use [--skip "nd_copy<uint64"]

``ci/gpu_host_digest.py`` hashes the raw uploads and launch arguments: any change to the order
or number of allocations changes it. Here, per launch: the kernel, grid and block; scalar
arguments by value; an address into a descriptor upload as that upload's bytes from there on
(for the kernels whose first argument is a table of ``grid[2]`` rows of a known type, just
those rows), every 8-byte word of them that is a device address replaced too; any other
address as (the n-th allocation that is not a descriptor upload, offset). Two checkouts that
print the same digest launch the same kernels over the same tables of the same data buffers.
Uploads are found by the address each returns, so uploads cut from one allocation (the GPU
stage's ``kernels.Arena``) are named as separate ones are.
Not covered: the bytes of data copied up (``ndarray.set``, the external source's copy) and
cuFFT (``gpu_host_digest.py`` covers the former).

The stand-in's allocations are spaced 2**36 bytes apart here, so that an address names one
allocation, and its 1-D slices get their offset (the stand-in keeps the base address). Run the
other checkout's dlpipe with ``PYTHONPATH`` pointing at a directory whose ``dlpipe`` is that
checkout's ``core`` (as ``gpu_host_digest.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_cupy"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cupy  # noqa: E402 (the stand-in)
import numpy as np  # noqa: E402
from gpu_host_digest import build_graph, log_launches  # noqa: E402

_BASE, _STEP = 1 << 40, 1 << 36


class Recorder:
    """Patches the stand-in CuPy and ``dlpipe.kernels.upload`` and logs every launch."""

    def __init__(self, first_use: bool = False, skip: str | None = None):
        self.first_use = first_use  # name addresses by first appearance (``--first-use``)
        self.skip = skip  # kernels whose name starts so are left out (``--skip``)
        self.seen: dict[int, int] = {}
        self.allocs: list[list] = []  # [address, bytes, made by a descriptor upload?]
        self.uploads: list[tuple] = []  # (device address, host bytes) of each upload
        self.log: list[bytes] = []
        self._uploading = False
        self._tables: dict = {}

    def install(self) -> None:
        """Patch before the launchers are imported (they bind ``kernels.upload`` then)."""
        import dlpipe.kernels as kernels

        cupy._ADDRESSES = itertools.count(_BASE, _STEP)
        getitem, empty, alloc = cupy.ndarray.__getitem__, cupy.empty, cupy.cuda.alloc
        upload = kernels.upload
        rec = self

        def sliced(self, index):
            out = getitem(self, index)
            if isinstance(index, slice) and self.ndim == 1 and index.step in (None, 1):
                start = index.start or 0
                start += self.shape[0] if start < 0 else 0
                out.data = cupy._Pointer(self.data.ptr + start * self.itemsize)
            return out

        def allocate(shape, dtype=np.float32, order="C"):
            a = empty(shape, dtype, order)
            rec.allocs.append([a.data.ptr, max(a.nbytes, 1), rec._uploading])
            return a

        def raw_alloc(nbytes):  # (``kernels._batch.device_empty``'s size classes)
            p = alloc(nbytes)
            rec.allocs.append([p.ptr, max(int(nbytes), 1), rec._uploading])
            return p

        def descriptor_upload(host, stream):
            rec._uploading = True
            try:
                dev = upload(host, stream)
            finally:
                rec._uploading = False
            rec.uploads.append((dev.data.ptr, np.ascontiguousarray(host).tobytes()))
            return dev

        cupy.ndarray.__getitem__ = sliced
        cupy.empty = allocate
        cupy.cuda.alloc = raw_alloc
        log_launches(
            self.log, lambda k, grid, block, args, _: rec.describe(k.name, grid, block, args)
        )
        for name, mod in list(sys.modules.items()):
            if name.startswith("dlpipe.kernels") and getattr(mod, "upload", None) is upload:
                mod.upload = descriptor_upload
        from dlpipe.kernels import audio, layout, normalize, reduce

        # (kernel name prefix -> the descriptor row type of its first argument)
        self._tables = {
            "reduce_": reduce.REDUCE_DESC,
            "normalize_apply": normalize.NORM_DESC,
            "extract_frames": audio.FRAMES_DESC,
            "spectrum_out": audio.SPEC_DESC,
            "nd_copy": layout.COPY_DESC,
        }

    def _find(self, ptr: int):
        best = None
        for a in self.allocs:
            if a[0] <= ptr and (best is None or a[0] > best[0]):
                best = a
        return best if best is not None and ptr - best[0] < _STEP else None

    def _upload_at(self, ptr: int):
        """The (address, bytes) of the upload ``ptr`` points into (the last one there), or
        None. An upload is its own allocation, or a cut of the GPU stage's arena (one
        allocation for a batch's uploads: ``dlpipe.kernels.Arena``); named the same."""
        for start, raw in reversed(self.uploads):
            if start <= ptr < start + max(len(raw), 1):
                return start, raw
        return None

    def name(self, ptr: int) -> tuple:
        u = self._upload_at(ptr)
        if u is not None:
            return ("upload", ptr - u[0])
        a = self._find(ptr)
        if a is None:  # (memory the stand-in made without cupy.empty: cuFFT's output)
            return ("?",)
        if a[2]:  # (an upload's allocation past its bytes)
            return ("upload-gap", ptr - a[0])
        if self.first_use:
            return ("addr", self.seen.setdefault(ptr, len(self.seen)))
        k = sum(1 for b in itertools.takewhile(lambda b: b is not a, self.allocs) if not b[2])
        return ("alloc", k, ptr - a[0])

    def _words(self, raw: bytes) -> tuple:
        k = len(raw) // 8 * 8
        hi = _BASE + _STEP * 100_000  # (the stand-in numbers views and reshapes too)
        words = np.frombuffer(raw[:k], np.uint64).tolist()
        return tuple(self.name(w) if _BASE <= w < hi else w for w in words) + (raw[k:],)

    def describe(self, kernel: str, grid, block, args) -> list | None:
        if self.skip and kernel.startswith(self.skip):
            return None  # (left out of the log, its addresses unnamed)
        out = [kernel, grid, block]
        table = next((t for p, t in self._tables.items() if kernel.startswith(p)), None)
        for i, a in enumerate(args):
            if isinstance(a, cupy.ndarray):
                ptr = a.data.ptr
            elif isinstance(a, np.uint64) and int(a) >= _BASE:
                ptr = int(a)
            else:
                out.append(repr(a))
                continue
            where = self.name(ptr)
            if where[0] != "upload":
                out.append(where)
                continue
            raw = self._upload_at(ptr)[1][where[1] :]
            if table is not None and i == 0:
                raw = raw[: grid[2] * table.itemsize]
            out.append(("upload", self._words(raw)))
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", choices=["speech", "nemo"], default="nemo")
    ap.add_argument("--aug", choices=["train", "val"], default="val", help="speech: the split")
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--first-use", action="store_true",
                    help="name every address that is not into a descriptor upload by the order "
                    "of its first appearance, not by (allocation, offset): the same digest for "
                    "buffers grouped into fewer allocations")  # fmt: skip
    ap.add_argument("--skip", help="leave out the launches of kernels whose name starts so "
                    "(to compare with a checkout that no longer launches them)")  # fmt: skip
    args = ap.parse_args()
    rec = Recorder(args.first_use, args.skip)
    rec.install()
    pipe, label = build_graph(args.graph, args.aug, args.batch)
    for _ in range(args.iters):
        pipe.run()
    rec.log = [x for x in rec.log if x != b"None"]
    digest = hashlib.sha256(b"".join(rec.log)).hexdigest()
    print(f"{label}: {len(rec.log)} launches, {digest}")


if __name__ == "__main__":
    main()
