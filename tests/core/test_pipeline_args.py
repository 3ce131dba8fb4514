"""Argument checks at the API edge: Pipeline arguments in ``Pipeline.__init__`` and operator
arguments at the fn/ops call (``_argcheck.py``), each error naming the argument and its value."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, fn, ops, pipeline_def
from dlpipe._argcheck import _numeric_args
from dlpipe.errors import ArgumentTypeError
from dlpipe.graph import REGISTRY


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        # argparse without type=int hands out strings
        (dict(batch_size="8"), ArgumentTypeError, r"batch_size='8' is a str; .*type=int"),
        (dict(num_threads="4"), ArgumentTypeError, r"num_threads='4' is a str; .*type=int"),
        (dict(seed="1"), ArgumentTypeError, r"seed='1' is a str; .*type=int"),
        (dict(device_id="0"), ArgumentTypeError, r"device_id='0' is a str"),
        (dict(batch_size=2.5), ArgumentTypeError, r"batch_size=2\.5 is a float; pass an int"),
        (dict(num_threads=2.0), ArgumentTypeError, r"num_threads=2\.0 is a float"),
        (dict(batch_size=True), ArgumentTypeError, r"batch_size=True is a bool"),
        (dict(batch_size="eight"), ArgumentTypeError, r"batch_size='eight' is a str; pass an int$"),
        (dict(batch_size=0), ArgumentError, r"batch_size=0 must be >= 1"),
        (dict(batch_size=-5), ArgumentError, r"batch_size=-5 must be >= 1"),
        (dict(num_threads=0), ArgumentError, r"num_threads=0 must be >= 1"),
        (dict(prefetch_queue_depth=0), ArgumentError, r"prefetch_queue_depth=0 must be >= 1"),
        (dict(prefetch_queue_depth="2"), ArgumentTypeError, r"prefetch_queue_depth='2'"),
        (
            dict(prefetch_queue_depth={"cpu_size": "2", "gpu_size": 2}),
            ArgumentTypeError,
            r"prefetch_queue_depth\['cpu_size'\]='2'",
        ),
        (
            dict(prefetch_queue_depth={"cpu_size": 0, "gpu_size": 2}),
            ArgumentError,
            r"prefetch_queue_depth\['cpu_size'\]=0 must be >= 1",
        ),
        (dict(device_id=-2), ArgumentError, r"device_id=-2 must be >= 0"),
        (dict(device_id=1.0), ArgumentTypeError, r"device_id=1\.0 is a float"),
        (dict(max_streams=0), ArgumentError, r"max_streams=0 must be >= 1 or -1"),
        (dict(py_num_workers=0), ArgumentError, r"py_num_workers=0 must be >= 1"),
        (dict(bytes_per_sample=-1), ArgumentError, r"bytes_per_sample=-1 must be >= 0"),
        (dict(exec_async="False"), ArgumentTypeError, r"exec_async='False' is a str"),
        (dict(exec_pipelined=2), ArgumentTypeError, r"exec_pipelined=2 is a int"),
        (dict(enable_checkpointing="yes"), ArgumentTypeError, r"enable_checkpointing='yes'"),
        (dict(set_affinity="no"), ArgumentTypeError, r"set_affinity='no'"),
        (dict(checkpoint=3), ArgumentTypeError, r"checkpoint=int"),
        (dict(output_ndim="3"), ArgumentTypeError, r"output_ndim='3'"),
        (dict(output_ndim=[1, -1]), ArgumentError, r"output_ndim=-1 must be >= 0"),
        (dict(runtime={"read_process": False}), ArgumentTypeError, r"RuntimeOptions"),
    ],
)
def test_pipeline_refuses_bad_arguments_at_construction(kwargs, error, message):
    args = {"batch_size": 2, "num_threads": 1, **kwargs}
    with pytest.raises(error, match=message):
        Pipeline(**args)


def test_type_errors_are_type_errors_and_argument_errors():
    # callers catching TypeError (Python's own) and those catching ArgumentError both work
    with pytest.raises(TypeError):
        Pipeline(batch_size="8")
    with pytest.raises(ArgumentError):
        Pipeline(batch_size="8")


def test_pipeline_def_reports_the_same():
    @pipeline_def
    def p():
        return fn.random.uniform(range=(0, 1))

    with pytest.raises(ArgumentTypeError, match=r"batch_size='8'.*type=int"):
        p(batch_size="8", num_threads=1)


def test_pipeline_accepts_good_values():
    p = Pipeline(
        batch_size=np.int64(4),
        num_threads=np.int32(2),
        device_id=None,
        seed=-1,
        exec_async=np.bool_(False),
        exec_pipelined=1,
        prefetch_queue_depth=np.int64(3),
        max_streams=-1,
    )
    assert (p.max_batch_size, p.num_threads, p.cpu_queue_size) == (4, 2, 3)
    assert type(p.max_batch_size) is int and type(p.num_threads) is int
    assert p.exec_async is False and p.exec_pipelined is True
    # -1 (not given) is DALI's default; build() refuses it later (test_pipeline.py)
    assert Pipeline().max_batch_size == -1
    assert Pipeline(batch_size=1, device_id=-99999).device_id == -99999  # CPU_ONLY_DEVICE_ID
    assert Pipeline(batch_size=1, seed=np.int64(5)).seed == 5


# --- operators ------------------------------------------------------------------------------


def _pipe():
    return Pipeline(batch_size=2, num_threads=1)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: fn.readers.file(files=["a"], random_shuffle="False"),
            r"readers\.file: argument random_shuffle='False' is a str; pass True or False$",
        ),
        (
            lambda: fn.readers.file(files=["a"], shard_id="1", num_shards=2),
            r"readers\.file: argument shard_id='1' is a str; pass a number \(an int\) \(argparse: type=int",
        ),
        (
            lambda: fn.readers.file(files=["a", "b"], labels=["0", "1"]),
            r"readers\.file: argument labels=\['0', '1'\] \(element '0'\) is a str",
        ),
        (
            lambda: fn.random.uniform(range=(0, 1), seed="3"),
            r"random\.uniform: seed='3' is a str; pass an int \(argparse: type=int\)",
        ),
        (
            lambda: fn.random.uniform(range=(0, 1), seed=1.5),
            r"random\.uniform: seed=1\.5 is a float",
        ),
        (
            lambda: fn.crop_mirror_normalize(
                fn.random.uniform(range=(0, 1), shape=(4, 4, 3)), mean=[0.5, "0.5", 0.5]
            ),
            r"crop_mirror_normalize: argument mean=.* \(element '0\.5'\) is a str",
        ),
        (
            lambda: fn.decoders.image(fn.readers.file(files=["a"])[0], hw_decoder_load="0.9"),
            r"decoders\.image: argument hw_decoder_load='0\.9' is a str; .*type=float",
        ),
    ],
)
def test_fn_refuses_strings_for_numbers(call, message):
    with _pipe(), pytest.raises(ArgumentTypeError, match=message):
        call()


def test_ops_refuses_strings_for_numbers_at_the_call():
    reader = ops.readers.File(files=["a"], pad_last_batch="True")
    with _pipe(), pytest.raises(ArgumentTypeError, match="pad_last_batch='True'"):
        reader()


def test_strings_still_go_where_strings_belong(tmp_path):
    # a directory whose name is a number is a path, not a number
    (tmp_path / "2024" / "0").mkdir(parents=True)
    (tmp_path / "2024" / "0" / "x.jpg").write_bytes(b"x")
    with _pipe():
        fn.readers.file(file_root=str(tmp_path / "2024"), name="1")
        fn.random.uniform(range=(0, 1), seed=np.int64(3))


def test_numeric_arguments_are_found_from_signatures():
    # by default value (numbers, tuples of numbers) or by annotation (float | None, ...):
    # DALI's numeric arguments of a few operators, and none of their string arguments
    expect = {
        "readers.file": ({"shard_id", "num_shards", "random_shuffle", "labels"}, {"file_root"}),
        "decoders.image": ({"hw_decoder_load", "affine"}, {"output_type", "on_error"}),
        "crop_mirror_normalize": ({"mean", "std", "crop_pos_x", "mirror"}, {"output_layout"}),
        "resize": ({"antialias", "minibatch_size"}, {"interp_type", "mode"}),
    }
    for schema, (numeric, textual) in expect.items():
        found = _numeric_args(REGISTRY[schema])
        assert numeric <= set(found), (schema, numeric - set(found))
        assert not textual & set(found), (schema, textual & set(found))
    assert _numeric_args(REGISTRY["readers.file"])["random_shuffle"] == "bool"
    assert _numeric_args(REGISTRY["readers.file"])["shard_id"] == "int"
    assert _numeric_args(REGISTRY["decoders.image"])["hw_decoder_load"] == "number"
