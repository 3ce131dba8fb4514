"""dlpipe.plugins.pytorch.experimental.proxy: a Dataset of file paths through the proxy, with
0 and 2 workers, pin_memory and deterministic ordering, gives the batches of the pipeline fed
directly; the proxy callable, produce_data on nested structures, errors, server restarts."""

from __future__ import annotations

import collections
import inspect
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils import data as torchdata  # noqa: E402
from torch.utils.data import default_collate  # noqa: E402

import dlpipe.plugins.pytorch.experimental.proxy as dali_proxy  # noqa: E402
from dlpipe import Pipeline, fn, pipeline_def, types  # noqa: E402
from dlpipe.synthetic import make_dataset  # noqa: E402

pytestmark = pytest.mark.torch

BATCH = 4


@pytest.fixture(scope="module")
def jpeg_files(tmp_path_factory):
    root = make_dataset(
        str(tmp_path_factory.mktemp("proxy")),
        num_classes=2,
        per_class=7,
        size_range=(24, 48),
        seed=5,
    )
    files = []
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    for label, cls in enumerate(classes):
        for name in sorted(os.listdir(os.path.join(root, cls))):
            files.append((os.path.join(root, cls, name), label))
    return files


def read_filepath(path: str) -> np.ndarray:
    return np.frombuffer(path.encode(), dtype=np.int8)


class PathDataset(torchdata.Dataset):
    """(transform(encoded path), label) per file, as torchvision's ImageFolder with a loader."""

    def __init__(self, files, transform):
        self.files = files
        self.transform = transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, idx):
        path, label = self.files[idx]
        return self.transform(read_filepath(path)), label


@pipeline_def
def decode_pipe():
    paths = fn.external_source(name="images", no_copy=True)
    images = fn.decoders.image(fn.io.file.read(paths), device="cpu", output_type=types.RGB)
    images = fn.resize(images, size=[20, 20])
    return fn.crop_mirror_normalize(
        images, dtype=types.FLOAT, output_layout="CHW", mean=[128.0] * 3, std=[64.0] * 3
    )


def reference_batches(files, drop_last):
    """The pipeline fed directly, batch by batch, with the files in order."""
    pipe = decode_pipe(batch_size=BATCH, num_threads=1, device_id=None, prefetch_queue_depth=1)
    out = []
    stop = len(files) - len(files) % BATCH if drop_last else len(files)
    for start in range(0, stop, BATCH):
        chunk = files[start : start + BATCH]
        pipe.feed_input("images", [read_filepath(p) for p, _ in chunk])
        (images,) = pipe.run()
        out.append((np.asarray(images.as_tensor()), [lbl for _, lbl in chunk]))
    return out


@pytest.mark.parametrize(
    "num_workers, pin_memory, deterministic, drop_last",
    [(0, False, False, False), (2, False, False, True), (2, True, True, False)],
)
def test_loader_matches_pipeline_fed_directly(
    jpeg_files, num_workers, pin_memory, deterministic, drop_last
):
    pipe = decode_pipe(batch_size=BATCH, num_threads=2, device_id=None, prefetch_queue_depth=3)
    server = dali_proxy.DALIServer(pipe, deterministic=deterministic)
    loader = dali_proxy.DataLoader(
        server,
        PathDataset(jpeg_files, server.proxy),
        batch_size=BATCH,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
    )
    got = [(images, labels) for images, labels in loader]
    want = reference_batches(jpeg_files, drop_last)
    assert len(got) == len(want) == (3 if drop_last else 4)
    for (images, labels), (ref_images, ref_labels) in zip(got, want, strict=True):
        assert isinstance(images, torch.Tensor) and images.dtype == torch.float32
        assert tuple(images.shape) == ref_images.shape  # (batch, 3, 20, 20); last batch smaller
        np.testing.assert_array_equal(images.numpy(), ref_images)
        assert labels.tolist() == ref_labels
    assert server._thread is None  # the loader started the server, and stopped it at the end


@pipeline_def
def pipe_2_outputs():
    a = fn.external_source(name="a", no_copy=True)
    b = fn.external_source(name="b", no_copy=True)
    return fn.cat(a, b), fn.stack(b, a)


def test_proxy_callable_keyword_and_positional():
    pipe = pipe_2_outputs(batch_size=BATCH, num_threads=1, device_id=None)
    with dali_proxy.DALIServer(pipe) as server:
        proxy = server.proxy
        assert proxy is server.proxy
        assert list(inspect.signature(proxy).parameters) == ["a", "b"]
        rows = []
        for i in range(BATCH):
            a = np.full(3, i, np.float32)
            b = np.arange(3, dtype=np.float32) + 10 * i
            out0, out1 = proxy(b=b, a=a)  # keyword order does not matter
            assert isinstance(out0, dali_proxy.DALIOutputSampleRef)
            rows.append((a, b, out0, out1))
        batch = default_collate(rows)
        assert isinstance(batch[2], dali_proxy.DALIOutputBatchRef)
        a, b, cat, stacked = server.produce_data(batch)
        np.testing.assert_array_equal(cat.numpy(), np.concatenate([a.numpy(), b.numpy()], 1))
        np.testing.assert_array_equal(stacked.numpy(), np.stack([b.numpy(), a.numpy()], 1))
        with pytest.raises(ValueError, match=r"Expected signature is: \(\*, a, b\)"):
            proxy(np.zeros(3), np.zeros(3))  # two inputs: keywords only


def test_single_input_is_positional_and_duplicated_outputs(jpeg_files):
    pipe = decode_pipe(batch_size=BATCH, num_threads=1, device_id=None)

    class Twice(PathDataset):
        def __getitem__(self, idx):
            path, label = self.files[idx]
            ref = self.transform(read_filepath(path))
            return ref, label, {"again": ref}

    with dali_proxy.DALIServer(pipe) as server:
        loader = dali_proxy.DataLoader(
            server, Twice(jpeg_files[:8], server.proxy), batch_size=BATCH, num_workers=2
        )
        for images, _, extra in loader:
            assert extra["again"] is images
        assert server._thread is not None  # started by `with`, not stopped by the loader


def test_produce_data_structures_and_cycles():
    pipe = pipe_2_outputs(batch_size=2, num_threads=1, device_id=None)
    Pair = collections.namedtuple("Pair", "x y")

    class Holder:
        def __init__(self):
            self.me = self
            self.value = None

    with dali_proxy.DALIServer(pipe) as server:
        rows = [server.proxy(a=np.ones(2, np.int32) * i, b=np.zeros(2, np.int32)) for i in (1, 2)]
        batch = default_collate(rows)
        holder = Holder()
        holder.value = batch[0]
        data = {"pair": Pair(batch[0], 5), "list": [batch[1], "text"], "obj": holder}
        out = server.produce_data(data)
        assert out is data  # dicts, lists, objects change in place
        assert isinstance(out["pair"], Pair) and out["pair"].y == 5
        np.testing.assert_array_equal(out["pair"].x.numpy(), [[1, 1, 0, 0], [2, 2, 0, 0]])
        assert out["list"][1] == "text" and out["list"][0].shape == (2, 2, 2)
        assert out["obj"].value is out["pair"].x and out["obj"].me is holder


@pipeline_def
def twice():
    a = fn.external_source(name="a", no_copy=True)
    return fn.cat(a, a)


class NumbersDataset(torchdata.Dataset):
    def __init__(self, transform, n=10):
        self.transform, self.n = transform, n

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        return np.array(idx), self.transform(np.array([idx]))


def test_restart_server_each_epoch():
    server = dali_proxy.DALIServer(twice(batch_size=BATCH, num_threads=1, device_id=None))
    loader = dali_proxy.DataLoader(
        server, NumbersDataset(server.proxy), batch_size=BATCH, num_workers=2, drop_last=True
    )
    for _ in range(3):
        assert server._thread is None
        seen = []
        for idx, out in loader:
            assert server._thread is not None
            seen += idx.tolist()
            np.testing.assert_array_equal(out.numpy(), np.stack([idx.numpy()] * 2, 1))
        assert server._thread is None
        assert sorted(seen) == list(range(8))


def test_pipeline_errors_reach_the_loop():
    @pipeline_def
    def broken():
        paths = fn.external_source(name="images", no_copy=True)
        return fn.io.file.read(paths)

    pipe = broken(batch_size=2, num_threads=1, device_id=None)
    server = dali_proxy.DALIServer(pipe)
    data = NumbersDataset(server.proxy, n=4)  # int64 arrays are not encoded paths
    loader = dali_proxy.DataLoader(server, data, batch_size=2, num_workers=0)
    with pytest.raises(Exception, match="uint8 or int8"):
        next(iter(loader))
    server.stop_thread()


def test_server_needs_a_pipeline_with_inputs():
    with pytest.raises(TypeError, match="Expected a dlpipe pipeline"):
        dali_proxy.DALIServer(object())
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=None)
    with pipe:
        pipe.set_outputs(fn.random.uniform(range=[0, 1]))
    with pytest.raises(RuntimeError, match="doesn't have any inputs"):
        dali_proxy.DALIServer(pipe)


def test_an_epoch_left_early_does_not_leak_into_the_next():
    """Workers count their batches from 0 each epoch: the outputs still in flight when a loop
    breaks must not be taken for the next epoch's batches of the same number."""
    server = dali_proxy.DALIServer(
        twice(batch_size=2, num_threads=1, device_id=None, prefetch_queue_depth=4)
    )
    loader = dali_proxy.DataLoader(
        server, NumbersDataset(server.proxy, n=12), batch_size=2, num_workers=2, shuffle=True
    )
    with server:  # the server keeps running between the epochs
        for epoch in range(3):
            for step, (idx, out) in enumerate(loader):
                np.testing.assert_array_equal(out.numpy(), np.stack([idx.numpy()] * 2, 1))
                if epoch < 2 and step == 1:
                    break  # leave batches in flight


def test_proxy_reachable_from_the_plugin_as_in_dali():
    """DALI 2.4's ``nvidia.dali.plugin.pytorch`` brings ``experimental.proxy`` with it: here
    ``dlpipe.plugins.pytorch.experimental.proxy`` is reached the same ways, imported only when
    first used (a fresh interpreter: the plugin's import does not load it)."""
    import subprocess
    import sys

    code = """
import sys
import dlpipe.plugins.pytorch as p
assert "dlpipe.plugins.pytorch.experimental" not in sys.modules
assert "dlpipe.plugins.pytorch.experimental.proxy" not in sys.modules
server = p.experimental.proxy.DALIServer
from dlpipe.plugins.pytorch.experimental import proxy
from dlpipe.plugins.pytorch import experimental
import dlpipe.plugins.pytorch.experimental.proxy as direct
assert server is proxy.DALIServer is direct.DALIServer and experimental is p.experimental
assert {"DALIServer", "DataLoader"} <= set(proxy.__all__)
for missing in (p, experimental):
    try:
        missing.DALIProxy
    except AttributeError:
        pass
    else:
        raise AssertionError(missing)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
