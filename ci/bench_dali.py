"""Side by side with NVIDIA DALI: the same user code on both libraries, through the PyTorch
iterator, over whole epochs, in one run (the method: ../shared/device/README.md).

    python3 ci/bench_dali.py --data /tmp/dlpipe-bench/imagenet-like [--rounds 2] [--only ...]
        [--examples .ext]

Each cell runs in a fresh process per library (``--child``), the libraries alternating, and the
order flipping from round to round. A child builds the pipeline from the user code below (or
from a DALI example file, with only its imports rewritten), wraps it in
``DALIGenericIterator``/``DALIClassificationIterator`` with ``reader_name="Reader"``, and
consumes ``--epochs`` whole epochs as a training loop would (each batch's tensors used on the
GPU, one synchronisation per epoch). It reports the median img/s of the epochs after the
first, and the CPU seconds of its whole process tree (helper processes included) over them.
The parent samples the GPUs' used memory (nvidia-smi) while the child runs; the peak above the
idle level is the cell's memory.

``--gpus 1,2`` runs each cell on 1 and then on 2 GPUs: one process per GPU (``device_id``,
``shard_id`` = its rank, ``num_shards`` = the count), as torchrun would start them; a cell's
img/s is then the sum of its processes' rates, and a last table gives the scaling.

``--examples DIR`` adds the pipelines of DALI's ``docs/examples/use_cases/pytorch/resnet50/
main.py`` (``create_dali_pipeline``, train and val) and DeepLearningExamples'
``PyTorch/Classification/ConvNets/image_classification/dataloaders.py`` (``HybridTrainPipe``,
``HybridValPipe``), read from ``DIR/dali_resnet50_main.py`` and ``DIR/dle_dataloaders.py``:
their pipeline definitions run as written, with ``nvidia.dali`` imports pointing at dlpipe
for the dlpipe side. Those files are not part of this repository; copy them there.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]

# name -> (pipeline, batch, threads, labels on the GPU)
CELLS = {
    "640-b128-gpu": ("seed640", 128, 16, True),
    "640-b128-host": ("seed640", 128, 16, False),
    "640-b32-gpu": ("seed640", 32, 8, True),
    "640-b32-host": ("seed640", 32, 8, False),
    "rn50-b128-gpu": ("rn50", 128, 16, True),
    "rn50-b128-host": ("rn50", 128, 16, False),
    "dali-example-train": ("dali_example_train", 128, 16, True),
    "dali-example-val": ("dali_example_val", 128, 16, True),
    "dle-train": ("dle_train", 128, 16, False),
    "dle-val": ("dle_val", 128, 16, False),
    "cpu-640": ("cpu640", 128, 16, False),
    # the ResNet-50 pipeline feeding a real training step (torchvision resnet18, fp16 autocast,
    # channels_last, SGD): whether the loader slows the user's own Python (MODEL_CELLS)
    "rn50-b128-gpu-resnet18": ("rn50", 128, 16, True),
}
MODEL_CELLS = {"rn50-b128-gpu-resnet18"}
EXAMPLE_CELLS = {"dali-example-train", "dali-example-val", "dle-train", "dle-val"}


# --- the user code (one script for both libraries) ------------------------------------------------


def user_pipelines(lib: str):
    """The pipelines a user writes, with the library's imports."""
    if lib == "dali":
        from nvidia.dali import fn, pipeline_def, types
    else:
        from dlpipe import fn, pipeline_def, types

    @pipeline_def
    def seed640(root, gpu_labels, device="mixed", shard_id=0, num_shards=1):
        jpegs, labels = fn.readers.file(
            file_root=root,
            random_shuffle=True,
            shard_id=shard_id,
            num_shards=num_shards,
            name="Reader",
        )
        images = fn.decoders.image(jpegs, device=device, output_type=types.RGB)
        images = fn.resize(images, resize_x=640, resize_y=640)
        return images, (labels.gpu() if gpu_labels else labels)

    @pipeline_def
    def rn50(root, gpu_labels, shard_id=0, num_shards=1):
        jpegs, labels = fn.readers.file(
            file_root=root,
            random_shuffle=True,
            shard_id=shard_id,
            num_shards=num_shards,
            name="Reader",
        )
        images = fn.decoders.image_random_crop(
            jpegs,
            device="mixed",
            output_type=types.RGB,
            random_aspect_ratio=[0.75, 4.0 / 3.0],
            random_area=[0.08, 1.0],
            num_attempts=100,
        )
        images = fn.resize(images, resize_x=224, resize_y=224, interp_type=types.INTERP_TRIANGULAR)
        images = fn.crop_mirror_normalize(
            images,
            dtype=types.FLOAT16,
            output_layout="CHW",
            crop=(224, 224),
            mean=MEAN,
            std=STD,
            mirror=fn.random.coin_flip(probability=0.5),
        )
        return images, (labels.gpu() if gpu_labels else labels)

    return {"seed640": seed640, "rn50": rn50}


def load_defs(path: str, names: list[str], lib: str) -> dict:
    """The top-level functions and classes ``names`` of a user's file, with the file's imports,
    run as written; for dlpipe, ``nvidia.dali`` in the imports becomes ``dlpipe``. Only the
    imports and those definitions run, so what the rest of the file needs (a model zoo, apex,
    DALI's DataLoader proxy) does not have to be there."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    keep: list[ast.stmt] = []

    def imports(nodes):
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                keep.append(node)
            elif isinstance(node, ast.Try):  # try: import nvidia.dali ... except ImportError
                imports(node.body)

    imports(tree.body)
    keep += [n for n in tree.body if getattr(n, "name", None) in names]
    if lib == "dlpipe":
        for node in keep:
            if isinstance(node, ast.ImportFrom) and node.module:
                node.module = _port(node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    alias.name = _port(alias.name)
    namespace = {"__name__": "user_pipelines"}
    for node in keep:
        if _optional_import(node):
            continue
        code = compile(ast.fix_missing_locations(ast.Module([node], [])), path, "exec")
        try:
            exec(code, namespace)
        except ImportError:
            if "dali" in ast.unparse(node) or "dlpipe" in ast.unparse(node):
                raise  # the library's own imports must work
    return namespace


def _port(module: str) -> str:
    """The import change a user makes to move from DALI to dlpipe."""
    if module.startswith("nvidia.dali.plugin"):
        return "dlpipe.plugins" + module[len("nvidia.dali.plugin") :]
    if module.startswith("nvidia.dali"):
        return "dlpipe" + module[len("nvidia.dali") :]
    return module


def _optional_import(node) -> bool:
    """Imports the pipeline definitions don't use (apex, in DLE's files); only imports (a
    class whose docstring names APEX, as the resnet50 example's data_prefetcher, stays)."""
    return isinstance(node, ast.Import | ast.ImportFrom | ast.Try) and "apex" in ast.unparse(node)


def build_pipeline(lib: str, name: str, batch: int, threads: int, gpu_labels: bool, args):
    root = args.data
    rank, world = args.rank, args.gpus
    kw = {"batch_size": batch, "num_threads": threads, "device_id": rank, "seed": 12 + rank}
    shard = {"shard_id": rank, "num_shards": world}
    if name in ("seed640", "rn50"):
        pipe = user_pipelines(lib)[name](root=root, gpu_labels=gpu_labels, **shard, **kw)
        return pipe, "generic"
    if name == "cpu640":
        kw["device_id"] = None
        pipe = user_pipelines(lib)["seed640"](
            root=args.cpu_data, gpu_labels=False, device="cpu", **kw
        )
        return pipe, "generic"
    if name.startswith("dali_example"):
        ns = load_defs(
            os.path.join(args.examples, "dali_resnet50_main.py"),
            ["create_dali_pipeline", "image_processing_func"],
            lib,
        )
        pipe = ns["create_dali_pipeline"](
            data_dir=root,
            crop=224,
            size=256,
            **shard,
            is_training=name.endswith("train"),
            **kw,
        )
        return pipe, "classification"
    ns = load_defs(
        os.path.join(args.examples, "dle_dataloaders.py"), ["HybridTrainPipe", "HybridValPipe"], lib
    )
    cls = ns["HybridTrainPipe" if name == "dle_train" else "HybridValPipe"]
    extra = {} if name == "dle_train" else {"size": 256}
    # newer dataloaders.py take the resize's interpolation (main.py's --interpolation default)
    if "interpolation" in inspect.signature(cls.__init__).parameters:
        extra["interpolation"] = "bilinear"
    return cls(batch, threads, 0, data_dir=root, crop=224, **extra), "classification"


# --- the child: one cell, one library -----------------------------------------------------------


def _tree_cpu_seconds() -> float:
    """utime + stime of this process and every process below it (helpers included)."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent_of, cpu = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent_of[int(pid)] = int(fields[1])
        cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / ticks
    me, total = os.getpid(), 0.0
    for pid, seconds in cpu.items():
        p = pid
        while p and p != me:
            p = parent_of.get(p, 0)
        if p == me:
            total += seconds
    return total


def child(args) -> None:
    """One classification cell on one library: the pipeline, its PyTorch iterator, the epochs."""
    name, batch, threads, gpu_labels = CELLS[args.cell]
    if args.lib == "dali":
        from nvidia.dali.plugin.pytorch import (
            DALIClassificationIterator,
            DALIGenericIterator,
            LastBatchPolicy,
        )
    else:
        from dlpipe.plugins.pytorch import (
            DALIClassificationIterator,
            DALIGenericIterator,
            LastBatchPolicy,
        )
    pipe, kind = build_pipeline(args.lib, name, batch, threads, gpu_labels, args)
    pipe.build()
    if kind == "classification":
        it = DALIClassificationIterator(
            pipe, reader_name="Reader", last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True
        )
    else:
        it = DALIGenericIterator(
            pipe,
            ["data", "label"],
            reader_name="Reader",
            last_batch_policy=LastBatchPolicy.PARTIAL,
            auto_reset=True,
        )

    def use(data):
        x, y = data[0]["data"], data[0]["label"]
        return x.shape[0], x.view(x.shape[0], -1)[:, 0].float().sum() + y.sum()

    if args.cell in MODEL_CELLS:
        use = training_step()
    measure(args, pipe, it, use, batch, on_gpu=name != "cpu640")


def training_step() -> Callable:
    """``use`` for the MODEL_CELLS: one SGD step of torchvision's resnet18 on the batch (fp16
    autocast, channels_last), as a training loop runs it: a few hundred kernel launches from
    this thread per batch, each one taking the GIL back from the loader's threads."""
    import torch
    import torchvision

    model = (
        torchvision.models.resnet18(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(data):
        x, y = data[0]["data"], data[0]["label"]
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y.view(-1).long())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return x.shape[0], loss.detach().float()

    return step


def measure(args, pipe, it, use, batch: int, on_gpu: bool = True) -> None:
    """Consume ``args.epochs`` whole epochs of ``it`` as a training loop would and print the
    cell's ``RESULT`` line (the parent reads it): the median img/s of the epochs after the
    first, the CPU seconds of this process tree over them, dlpipe's stats on request.

    ``use(data)`` takes one batch as the iterator gives it and returns (samples, a torch scalar
    computed from its tensors): each batch is used on the GPU, one synchronisation per epoch.
    """
    import torch

    if args.gpus > 1:
        torch.cuda.set_device(args.rank)
    switch = os.environ.get("DLPIPE_BENCH_SWITCH")  # a GIL diagnostic: sys.setswitchinterval
    if switch:
        sys.setswitchinterval(float(switch))
    rates, cpu_start = [], None
    profile = os.environ.get("DLPIPE_BENCH_PROFILE")  # a folder: where the host time goes
    # a folder: cProfile of this (the training loop's) thread alone, CPU time, timed epochs
    main_profile = os.environ.get("DLPIPE_BENCH_CPROFILE")
    prof = None
    for epoch in range(args.epochs):
        if epoch == 1:
            cpu_start = _tree_cpu_seconds()
            threads_start = thread_cpu_seconds()
            if profile:
                import yappi

                yappi.set_clock_type("cpu")
                yappi.start(profile_threads=True)
            if main_profile:
                import cProfile

                prof = cProfile.Profile(time.thread_time)
                prof.enable()
        start, images, acc = time.perf_counter(), 0, 0
        for data in it:
            n, value = use(data)
            acc = acc + value
            images += n
        if on_gpu:
            torch.cuda.synchronize()
        float(acc)
        rates.append(images / (time.perf_counter() - start))
    cpu = _tree_cpu_seconds() - cpu_start
    threads_cpu = thread_cpu_seconds()
    timed = rates[1:]
    if profile:
        _write_profile(profile, f"{args.lib}-{args.cell}", images * len(timed) / batch)
    if prof is not None:
        prof.disable()
        _write_cprofile(prof, main_profile, f"{args.lib}-{args.cell}", images * len(timed) / batch)
    stats = None
    if args.lib == "dlpipe" and args.stats:
        st = pipe.stats()
        stats = {
            "stages_ms": {k: v["per_iteration_ms"] for k, v in st["stages"].items()},
            "ops_us_per_sample": {
                k: v["per_sample_us"] for k, v in list(st["operators"].items())[:10]
            },
            "wait_ms": st["consumer_wait_ms_per_batch"],
            "work_ms": st["consumer_work_ms_per_batch"],
            "ready": st["mean_ready_batches"],
            # this process's GPU memory besides the CUDA context: CuPy's pool (used, held),
            # torch's cache; the rest of nvidia-smi's figure is the context and direct
            # allocations (the decode slots)
            "cupy_pool_mib": _cupy_pool_mib() if on_gpu else None,
            "torch_reserved_mib": torch.cuda.memory_reserved() >> 20 if on_gpu else None,
            # CPU ms per batch of each thread of this process over the timed epochs, by name
            # (threads of one name summed): who takes the GIL, without a profiler's overhead
            "threads_cpu_ms": _per_batch(threads_start, threads_cpu, images * len(timed) / batch),
        }
        if args.trace:
            pipe.trace(os.path.join(args.trace, f"trace-{args.cell}.json"))
    print(
        "RESULT "
        + json.dumps(
            {
                "cell": args.cell,
                "lib": args.lib,
                "rank": args.rank,
                "img_s": statistics.median(timed),
                "epochs": [round(r) for r in rates],
                "images_per_epoch": images,
                "cpu_us_per_image": 1e6 * cpu / (images * len(timed)),
                "stats": stats,
            }
        ),
        flush=True,
    )
    del it
    if hasattr(pipe, "close"):
        pipe.close()


def thread_cpu_seconds() -> dict[int, tuple[str, float]]:
    """{native thread id: (name, CPU seconds)} of this process's Python threads, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue
        out[t.native_id] = (t.name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def _per_batch(start: dict, end: dict, batches: float) -> dict[str, float]:
    per: dict[str, float] = {}
    for tid, (name, sec) in end.items():
        name = name.rsplit("_", 1)[0] if name[-1:].isdigit() else name
        per[name] = per.get(name, 0.0) + sec - start.get(tid, (name, 0.0))[1]
    return {k: round(1e3 * v / batches, 2) for k, v in sorted(per.items(), key=lambda kv: -kv[1])}


def _cupy_pool_mib() -> list[int]:
    import cupy

    pool = cupy.get_default_memory_pool()
    return [pool.used_bytes() >> 20, pool.total_bytes() >> 20]


def _write_profile(folder: str, name: str, batches: float) -> None:
    """CPU time per batch of every thread of this process, and of the functions that take the
    most (own time), from yappi: where the pipeline's process spends its GIL."""
    import yappi

    yappi.stop()
    names = {t.ident: t.name for t in threading.enumerate()}
    lines = [f"{name}: CPU ms per batch, {batches:.0f} batches"]
    for t in sorted(yappi.get_thread_stats(), key=lambda t: -t.ttot):
        label = names.get(t.tid, t.name)
        lines.append(f"  thread {label:<28} {1e3 * t.ttot / batches:8.3f}")
    stats = yappi.get_func_stats()
    stats.sort("tsub", "desc")
    lines.append("  own ms/batch   calls/batch  function")
    for f in list(stats)[:45]:
        where = f"{f.module.rsplit('/', 2)[-1]}:{f.lineno} {f.name}"
        lines.append(f"  {1e3 * f.tsub / batches:12.3f} {f.ncall / batches:12.1f}  {where}")
    # each busy thread on its own: what it spends its share of the GIL on
    for t in sorted(yappi.get_thread_stats(), key=lambda t: -t.ttot)[:5]:
        lines.append(f"  thread {names.get(t.tid, t.name)}: own ms/batch, calls/batch")
        own = yappi.get_func_stats(filter={"ctx_id": t.id})
        own.sort("tsub", "desc")
        for f in list(own)[:18]:
            where = f"{f.module.rsplit('/', 2)[-1]}:{f.lineno} {f.name}"
            lines.append(f"    {1e3 * f.tsub / batches:10.3f} {f.ncall / batches:10.1f}  {where}")
    with open(os.path.join(folder, f"profile-{name}.txt"), "w") as out:
        out.write("\n".join(lines) + "\n")


def _write_cprofile(prof, folder: str, name: str, batches: float) -> None:
    """The training loop's thread: its CPU ms per batch by function (own and cumulative)."""
    import pstats

    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:40]
    total = sum(v[2] for v in st.stats.values())
    lines = [f"{name}: main thread {1e3 * total / batches:.3f} CPU ms per batch, {batches:.0f}"]
    lines.append("  own ms/batch   cum ms/batch  calls/batch  function")
    for (path, line, func), (_, calls, own, cum, _) in rows:
        where = f"{path.rsplit('/', 2)[-1]}:{line} {func}"
        lines.append(
            f"  {1e3 * own / batches:12.3f} {1e3 * cum / batches:13.3f} {calls / batches:12.1f}"
            f"  {where}"
        )
    with open(os.path.join(folder, f"cprofile-{name}.txt"), "w") as out:
        out.write("\n".join(lines) + "\n")


# --- the parent ----------------------------------------------------------------------------------


def _gpu_used_mib() -> int:
    """Used memory of every GPU of the machine, summed."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:  # no GPU here (a CPU-only run)
        return 0
    return sum(int(v) for v in out.stdout.split()) if out.returncode == 0 else 0


def _gpu_apps() -> dict[str, int]:
    """MiB per process role on the GPU (main, decode helper), where nvidia-smi tells."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
        ).stdout
    except FileNotFoundError:
        return {}
    roles: dict[str, int] = {}
    for line in out.splitlines():
        try:
            pid, mib = (int(v) for v in line.split(","))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (ValueError, OSError):
            continue
        # dlpipe's helpers all run _ipc/boot.py; of them only the decode servers use a GPU
        role = "decode" if b"_ipc/boot.py" in cmd or b"_decode_server" in cmd else "main"
        roles[role] = roles.get(role, 0) + mib
        roles[role + "_n"] = roles.get(role + "_n", 0) + 1
    return roles


def child_python(lib: str) -> list[str]:
    """The interpreter (and its bootstrap) a child of ``lib`` runs on: ``sys.executable``, or
    for DALI ``$DLPIPE_BENCH_DALI_PYTHON`` when set (e.g. a CPU-only DALI in its own venv, as
    /tmp/dv/bin/python). That interpreter must be this one's Python version: this process's
    site folders (torch, dlpipe) are appended to its ``sys.path``, after its own (its numpy
    and DALI come first)."""
    other = os.environ.get("DLPIPE_BENCH_DALI_PYTHON")
    if lib != "dali" or not other:
        return [sys.executable]
    sites = [p for p in sys.path if p.endswith("site-packages")]
    boot = (
        "import runpy, site, sys\n"
        f"for d in {sites!r}:\n"
        "    site.addsitedir(d)\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    return [other, "-c", boot]


def run_cell(cell: str, lib: str, args, gpus: int = 1, script: str = __file__) -> dict:
    idle = _gpu_used_mib()
    peak = [idle]
    apps: dict = {}
    done = threading.Event()

    def sample():
        while not done.wait(0.2):
            used = _gpu_used_mib()
            if used > peak[0]:
                peak[0] = used
                apps.update(_gpu_apps())

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    name, _, env_text = lib.partition("+")  # "dlpipe+VAR=value;VAR2=value": a variant
    env = dict(os.environ)
    env.update(kv.split("=", 1) for kv in env_text.split(";") if kv)
    cmd = [*child_python(name), script, "--child", "--lib", name, "--cell", cell]
    for k in ("data", "cpu_data", "examples", "epochs", "trace"):
        cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
    cmd += ["--gpus", str(gpus)]
    if args.stats:
        cmd.append("--stats")
    t0 = time.perf_counter()
    # one process per GPU, as torchrun starts them, each reading its shard
    procs = [
        subprocess.Popen(
            cmd + ["--rank", str(rank)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in range(gpus)
    ]
    outs = []
    for proc in procs:
        try:
            outs.append((proc.returncode, *proc.communicate(timeout=args.cell_timeout)))
        except subprocess.TimeoutExpired:
            proc.kill()
            outs.append((-9, *proc.communicate()))
        outs[-1] = (proc.returncode, *outs[-1][1:])
    done.set()
    watcher.join()
    ranks = [
        json.loads(line[7:])
        for _, stdout, _ in outs
        for line in stdout.splitlines()
        if line.startswith("RESULT ")
    ]
    result = {"cell": cell, "lib": lib, "error": None, "gpus": gpus}
    if len(ranks) == gpus:
        result.update(ranks[0])
        result["lib"] = lib
        # the machine's rate: the ranks run at once, so their rates add up
        result["img_s"] = sum(r["img_s"] for r in ranks)
        result["rank_img_s"] = [round(r["img_s"]) for r in ranks]
        result["cpu_us_per_image"] = statistics.mean(r["cpu_us_per_image"] for r in ranks)
    bad = [o for o in outs if o[0] != 0]
    if bad or len(ranks) != gpus:
        result["error"] = "\n".join((o[2] or o[1])[-1500:] for o in (bad or outs))
    result["gpu_mib"] = peak[0] - idle
    result["gpu_apps_mib"] = apps
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def ensure_cpu_subset(data: str, cpu_data: str, per_class: int) -> None:
    """A smaller copy (symlinks) of the data set for the CPU-only cell."""
    if os.path.exists(os.path.join(cpu_data, ".complete")):
        return
    for d in sorted(os.listdir(data)):
        src = os.path.join(data, d)
        if not os.path.isdir(src) or d.startswith("."):
            continue
        os.makedirs(os.path.join(cpu_data, d), exist_ok=True)
        for f in sorted(os.listdir(src))[:per_class]:
            dst = os.path.join(cpu_data, d, f)
            if not os.path.exists(dst):
                os.symlink(os.path.join(src, f), dst)
    open(os.path.join(cpu_data, ".complete"), "w").close()


@dataclasses.dataclass
class Suite:
    """A set of side-by-side cells. Another benchmark script (ci/bench_dali_*.py) makes one and
    calls ``main(suite)``: the parent's loop, timing, memory sampling and tables are shared; a
    child (``script --child --cell NAME --lib LIB``) runs ``child(args)``, which builds the cell's
    pipeline for ``args.lib`` and ends in ``measure(...)``."""

    script: str
    cells: list[str]
    child: Callable[[argparse.Namespace], None]
    prepare: Callable[[argparse.Namespace], None]  # in the parent, once: make the data
    description: str = ""
    example_cells: frozenset = frozenset()  # need --examples
    single_gpu_cells: frozenset = frozenset()  # not run with --gpus > 1


def _prepare(args) -> None:
    sys.path.insert(0, HERE)
    from bench_gpu import ensure_dataset

    ensure_dataset(args.data, args.images)
    ensure_cpu_subset(args.data, args.cpu_data, per_class=100)


CLASSIFICATION = Suite(
    script=__file__,
    cells=list(CELLS),
    child=child,
    prepare=_prepare,
    description=__doc__.split("\n")[0],
    example_cells=frozenset(EXAMPLE_CELLS),
    # DLE's pipelines take their shard from torch.distributed
    single_gpu_cells=frozenset({"dle-train", "dle-val", "cpu-640"}),
)


def main(suite: Suite = CLASSIFICATION) -> None:
    p = argparse.ArgumentParser(description=suite.description)
    p.add_argument("--data", default="/tmp/dlpipe-bench/imagenet-like")
    p.add_argument("--cpu-data", default="/tmp/dlpipe-bench/imagenet-like-cpu")
    p.add_argument("--images", type=int, default=21460)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3, help="per cell; the first is a warm-up")
    p.add_argument("--only", default="", help="comma-separated cells (default: all)")
    p.add_argument(
        "--libs",
        default="dali,dlpipe",
        help="comma-separated; 'dlpipe+VAR=value;VAR2=value' is dlpipe with that environment",
    )
    p.add_argument("--examples", default="", help="folder with the DALI example files")
    p.add_argument("--json", default="", help="write every result here")
    p.add_argument("--cell-timeout", type=int, default=240)
    p.add_argument("--stats", action="store_true", help="dlpipe's pipe.stats() per cell")
    p.add_argument("--trace", default="", help="write dlpipe's Perfetto traces to this folder")
    p.add_argument(
        "--gpus",
        default="1",
        help="comma-separated GPU counts to run each cell on (e.g. 1,2): one process per GPU, "
        "each reading its shard, as torchrun starts them",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--lib", default="dlpipe", help=argparse.SUPPRESS)
    p.add_argument("--cell", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.gpus = int(args.gpus)
        return suite.child(args)

    suite.prepare(args)
    cells = [c for c in (args.only.split(",") if args.only else suite.cells) if c]
    if not args.examples:
        cells = [c for c in cells if c not in suite.example_cells]
    libs = args.libs.split(",")
    counts = [int(g) for g in args.gpus.split(",")]
    if max(counts) > 1:
        cells = [c for c in cells if c not in suite.single_gpu_cells]
    results = []
    for r in range(args.rounds):
        for cell in cells:
            for gpus in counts:
                for lib in libs if r % 2 == 0 else libs[::-1]:
                    res = run_cell(cell, lib, args, gpus, suite.script)
                    res["round"] = r
                    results.append(res)
                    print(json.dumps(res), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    for gpus in counts:
        if len(counts) > 1:
            print(f"\n{gpus} GPU(s), one process each:")
        print_table([r for r in results if r.get("gpus", 1) == gpus], cells, libs)
    if len(counts) > 1:
        print_scaling(results, cells, libs, counts)


def print_scaling(results: list[dict], cells: list[str], libs: list[str], counts) -> None:
    """img/s on each GPU count over img/s on the fewest, per library (medians over rounds)."""
    print("\n| cell | " + " | ".join(f"{lib} x{counts[-1]}/x{counts[0]}" for lib in libs) + " |")
    print("|---|" + "---|" * len(libs))
    for cell in cells:
        row = []
        for lib in libs:
            rate = [
                statistics.median(
                    [r["img_s"] for r in results if (r["cell"], r["lib"], r.get("gpus")) == key]
                    or [float("nan")]
                )
                for key in ((cell, lib, counts[0]), (cell, lib, counts[-1]))
            ]
            row.append(f"{rate[1] / rate[0]:.2f}")
        print(f"| {cell} | " + " | ".join(row) + " |")


def print_table(results: list[dict], cells: list[str], libs: list[str]) -> None:
    def med(cell, lib, key):
        vals = [r[key] for r in results if r["cell"] == cell and r["lib"] == lib and key in r]
        return statistics.median(vals) if vals else None

    print(
        "\n| cell | " + " | ".join(f"{lib} img/s" for lib in libs) + " | ratio | GPU MiB | "
        "CPU us/img |"
    )
    print("|---|" + "---|" * (len(libs) + 3))
    for cell in cells:
        rate = [med(cell, lib, "img_s") for lib in libs]
        mem = [med(cell, lib, "gpu_mib") for lib in libs]
        cpu = [med(cell, lib, "cpu_us_per_image") for lib in libs]
        ratio = f"{rate[-1] / rate[0]:.2f}" if None not in rate[:1] + rate[-1:] else "-"
        fmt = lambda xs, f: " / ".join("-" if x is None else f.format(x) for x in xs)  # noqa: E731
        print(
            f"| {cell} | "
            + " | ".join("-" if x is None else f"{x:,.0f}" for x in rate)
            + f" | {ratio} | {fmt(mem, '{:,.0f}')} | {fmt(cpu, '{:.0f}')} |"
        )
    for r in results:
        if r.get("error"):
            print(f"\n{r['cell']} / {r['lib']} failed:\n{r['error']}")


if __name__ == "__main__":
    main()
