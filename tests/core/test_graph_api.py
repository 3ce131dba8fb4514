"""What ported DALI programs touch beside operators: deprecated fn/ops aliases, arguments every
operator accepts (bytes_per_sample_hint, preserve, seed), import paths, fn.shapes,
fn.get_property, and the seed script's pipeline (a Korean multi-GPU loader blog) on the CPU."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from seed_script import create_dali_pipeline

import dlpipe
from dlpipe import Pipeline, fn, ops, types
from dlpipe._aliases import DEPRECATED
from dlpipe.graph import REGISTRY


def test_deprecated_fn_aliases_call_their_operator(make_files):
    root, _ = make_files(4)
    for alias, (schema, cls_name) in DEPRECATED.items():
        if schema in REGISTRY:
            assert callable(getattr(fn, alias)), alias
            assert getattr(ops, cls_name) is not None, cls_name
        else:
            assert not hasattr(fn, alias), alias
    pipe = Pipeline(batch_size=4, num_threads=1, device_id=None, seed=5)
    with pipe, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data, labels = fn.file_reader(file_root=root)
        flips = fn.coin_flip(probability=1.0)
        u = fn.uniform(range=(2.0, 2.0))
        pipe.set_outputs(data, flips, u)
    assert any(
        "fn.file_reader is deprecated: use fn.readers.file" in str(w.message) for w in caught
    )
    assert all(issubclass(w.category, DeprecationWarning) for w in caught)
    _, flips, u = pipe.run()
    assert [int(flips.at(i)) for i in range(4)] == [1, 1, 1, 1]
    assert float(u.at(0)) == 2.0


def test_every_operator_accepts_bytes_per_sample_hint_preserve_and_seed(make_files):
    root, _ = make_files(2)
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None, seed=5)
    with pipe:
        data, labels = fn.readers.file(file_root=root, bytes_per_sample_hint=1024, preserve=False)
        r = ops.random.Uniform(range=(0, 1), bytes_per_sample_hint=[8], seed=3, preserve=True)()
        out = fn.cast(labels, dtype=types.FLOAT, bytes_per_sample_hint=64, seed=1)
        pipe.set_outputs(out)
    pipe.run()
    assert r.source in pipe._reachable_ops()  # preserve=True keeps an unused operator


def test_import_paths():
    code = (
        "import sys\n"
        "from dlpipe.plugins.base_iterator import LastBatchPolicy\n"
        "from dlpipe.types import to_numpy_type, to_dali_type, Constant\n"
        "from dlpipe.backend import TensorListCPU, TensorListGPU, TensorCPU, TensorGPU\n"
        "from dlpipe.tensors import TensorListGPU as T2\n"
        "from dlpipe.pipeline.experimental import pipeline_def\n"
        "import dlpipe.math, dlpipe.pipeline.experimental\n"
        "assert not isinstance(object(), TensorListGPU)\n"
        "assert LastBatchPolicy.PARTIAL == 2\n"
        "bad = [m for m in ('cupy', 'torch', 'jax', 'tensorflow') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_type_conversions():
    assert types.to_numpy_type(types.FLOAT16) is np.float16
    assert types.to_numpy_type(types.BOOL) is np.bool_
    assert types.to_dali_type(np.uint8) == types.UINT8
    assert types.to_dali_type(np.dtype("float64")) == types.FLOAT64
    assert types.to_dali_type("torch.int64") == types.INT64
    assert types.to_dali_type("half") == types.FLOAT16
    with pytest.raises(TypeError, match="could not be converted"):
        types.to_dali_type("complex64")


def test_shapes_and_get_property(make_files):
    root, names = make_files(3)
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None, seed=1)
    with pipe:
        data, labels = fn.readers.file(file_root=root)
        sh = fn.shapes(data, dtype=types.INT32)
        info = fn.get_property(data, key="source_info")
        same = data.source_info()
        lay = fn.get_property(fn.external_source(lambda: [np.zeros((1, 1, 3))] * 3, layout="HWC"),
                              key="layout")  # fmt: skip
        pipe.set_outputs(data, sh, info, same, lay)
    data, sh, info, same, lay = pipe.run()
    for i in range(3):
        assert sh.at(i).dtype == np.int32 and sh.at(i).tolist() == [len(data.at(i))]
        path = bytes(info.at(i)).decode()
        assert path == data.source_info(i) and path.endswith(names[i].split("/")[-1])
        assert bytes(same.at(i)).decode() == path
        assert bytes(lay.at(i)).decode() == "HWC"


def test_shape_and_property_of_a_gpu_node_on_the_cpu_are_refused():
    from dlpipe.errors import PipelineError
    from dlpipe.graph import DataNode

    node = DataNode("images_on_gpu", "gpu", None)
    with pytest.raises(PipelineError, match="GPU -> CPU transfer inside the graph"):
        node.shape()
    with pytest.raises(PipelineError, match="GPU -> CPU transfer inside the graph"):
        node.source_info()


def test_newaxis_and_math_at_top_level():
    assert dlpipe.newaxis("F").name == "F"
    assert {"sqrt", "clamp", "atan2", "fpow"} <= set(dlpipe.math.__all__)


# --- the seed script --------------------------------------------------------------------------


def test_seed_script_runs_on_the_cpu(image_root):
    pipe = create_dali_pipeline(
        batch_size=4, num_threads=2, device_id=0, seed=12, data_dir=image_root, crop=32,
        size=40, shard_id=0, num_shards=2, dali_cpu=True,
    )  # fmt: skip
    images, labels = pipe.run()
    assert images.layout() == "CHW" and images.dtype == types.FLOAT
    assert images.as_array().shape == (4, 3, 32, 32)
    assert labels.dtype == types.INT32 and labels.as_array().shape == (4,)
    assert set(labels.as_array().tolist()) <= {0, 1, 2, 3}


def test_an_argument_given_as_none_is_not_given():
    # DALI drops None-valued arguments before building an operator: the default applies
    pipe = Pipeline(batch_size=2, num_threads=1, device_id=None)
    with pipe:
        img = np.arange(6, dtype=np.float32).reshape(2, 3, 1)
        x = fn.external_source(source=lambda: [img, img], layout="HWC")
        pipe.set_outputs(fn.cast(x, dtype=types.INT32, name=None), fn.flip(x, horizontal=None))
    cast, flipped = pipe.run()
    assert cast.at(0).dtype == np.int32 and cast.at(0)[..., 0].tolist() == [[0, 1, 2], [3, 4, 5]]
    np.testing.assert_array_equal(flipped.at(0), img[:, ::-1])  # horizontal defaults to 1
