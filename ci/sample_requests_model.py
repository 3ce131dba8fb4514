"""How many requests a batch should make of the sample processes (``_sample_processes.requests``):
batches of 32 samples whose bytes lie in a shared slot (as ``readers.file``'s do) through a
chain that sleeps ``--work-ms`` a sample (so the processes act as that many free cores even on a
small machine), sent as the CPU stage sends them: ``--in-flight`` batches before the first
one's replies are read (2: a front and a back thread). For each count of requests per batch it
prints the time a batch, the median latency of a batch, and the CPU the sending and reading
thread spent per batch (the GIL-bound part the training loop waits for).

    python3 ci/sample_requests_model.py [--procs 16] [--batches 150] [--work-ms 1]
"""

from __future__ import annotations

import argparse
import mmap
import os
import pickle
import sys
import time

import numpy as np

from dlpipe import _sample_processes as sp
from dlpipe._ipc.regions import share
from dlpipe._sample_processes import RemoteRun
from dlpipe._sample_server import Step


class Sleep:
    """``work`` seconds a sample, without a core; gives back the first 64 bytes as floats."""

    def __init__(self, work: float) -> None:
        self.work = work

    def run_sample(self, inputs, args, param):
        (x,) = inputs
        time.sleep(self.work)
        return x[:64].astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--batches", type=int, default=150)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--work-ms", type=float, default=1.0)
    ap.add_argument("--requests", default="16,8,4", help="requests per batch to try")
    ap.add_argument("--in-flight", default="2,1", help="batches sent before reading, to try")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from sample_requests_model import Sleep  # this file as a module: the processes import it

    fd = os.memfd_create("sample-requests-model", os.MFD_CLOEXEC)
    stride = 500_000
    os.ftruncate(fd, stride * args.batch)
    memory = mmap.mmap(fd, stride * args.batch)
    share(memory, fd)
    base = np.frombuffer(memory, np.uint8)
    sizes = np.random.default_rng(0).integers(30_000, stride, args.batch)  # WAVs of 1-15 s
    samples = [base[i * stride : i * stride + int(n)] for i, n in enumerate(sizes)]
    steps = [Step(Sleep(args.work_ms / 1e3), (0,), (), (1,))]
    run = RemoteRun(1, [], pickle.dumps(steps), [], [], (1,))
    procs = sp.SampleProcesses(args.procs)
    rule = sp.requests

    def items():
        return [(i, {0: a}, [None]) for i, a in enumerate(samples)]

    try:
        for _ in range(10):  # started, the slot mapped by every process
            procs.submit(run, items(), None, 1).result()
        for depth in map(int, args.in_flight.split(",")):
            print(f"{depth} in flight: the rule's {rule(args.batch, args.procs, depth)} requests")
            for count in map(int, args.requests.split(",")):
                sp.requests = lambda n, p, f=1, c=count: min(c, n, p)
                pending, latency = [], []
                start, cpu = time.perf_counter(), time.thread_time()
                for _ in range(args.batches):
                    pending.append((time.perf_counter(), procs.submit(run, items(), None, depth)))
                    if len(pending) == depth:
                        sent, p = pending.pop(0)
                        p.result()
                        latency.append(time.perf_counter() - sent)
                for sent, p in pending:
                    p.result()
                    latency.append(time.perf_counter() - sent)
                wall = (time.perf_counter() - start) / args.batches * 1e3
                cpu = (time.thread_time() - cpu) / args.batches * 1e3
                print(
                    f"  {count:2d} requests: {wall:.2f} ms/batch, latency {np.median(latency) * 1e3:.2f}"
                    f" ms (median), sending/reading thread {cpu:.2f} ms CPU/batch"
                )
    finally:
        sp.requests = rule
        procs.stop()


if __name__ == "__main__":
    main()
