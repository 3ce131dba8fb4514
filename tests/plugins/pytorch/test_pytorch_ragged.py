"""``feed_ndarray``, ``to_torch_type`` and ``DALIRaggedIterator`` (dense, list and sparse COO
outputs of ragged batches such as detection boxes)."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe import ArgumentError, Pipeline, PipelineError, fn, types

torch_plugin = pytest.importorskip("dlpipe.plugins.pytorch")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from dlpipe.plugins.pytorch import (  # noqa: E402
    DALIRaggedIterator,
    LastBatchPolicy,
    feed_ndarray,
    to_torch_type,
)


def test_to_torch_type():
    assert to_torch_type[types.FLOAT] is torch.float32
    assert to_torch_type[types.UINT8] is torch.uint8
    assert to_torch_type[types.INT32] is torch.int32
    assert to_torch_type[types.FLOAT16] is torch.float16
    assert to_torch_type[types.BOOL] is torch.bool


def test_feed_ndarray_tensors_and_lists():
    pipe = Pipeline(batch_size=3, num_threads=1, device_id=None)
    imgs = np.arange(3 * 2 * 5, dtype=np.uint8).reshape(3, 2, 5)
    boxes = [np.full((k, 4), k / 10, np.float32) for k in (2, 0, 3)]
    with pipe:
        pipe.set_outputs(fn.external_source(source=[imgs]), fn.external_source(source=[boxes]))
    images, bboxes = pipe.run()
    t = images.as_tensor()
    dst = torch.zeros(t.shape(), dtype=to_torch_type[t.dtype])
    assert feed_ndarray(t, dst) is dst
    np.testing.assert_array_equal(dst.numpy(), imgs)
    flat = torch.zeros((5, 4), dtype=torch.float32)
    feed_ndarray(bboxes, flat)  # a whole ragged batch: samples one after the other
    np.testing.assert_array_equal(flat.numpy(), np.concatenate(boxes))
    one = torch.zeros((3, 4))
    feed_ndarray(bboxes[2], one)
    np.testing.assert_array_equal(one.numpy(), boxes[2])
    with pytest.raises(ArgumentError, match="element type.*torch.float32 vs torch.int32"):
        feed_ndarray(bboxes[2], torch.zeros((3, 4), dtype=torch.int32))
    with pytest.raises(ArgumentError, match=r"DALI tensor has size \[3, 4\].*\[4, 3\]"):
        feed_ndarray(bboxes[2], torch.zeros((4, 3)))
    with pytest.raises(ArgumentError, match="contiguous"):
        feed_ndarray(bboxes[2], torch.zeros((4, 3)).t())
    pipe.close()


def ragged_pipe(batch_size=3):
    """An endless source: an image-like dense output, boxes and labels of ``i % 4`` rows for
    sample i."""

    def sample(info):
        i = info.idx_in_epoch
        k = i % 4
        return (
            np.full((2, 2), i, np.uint8),
            np.arange(k * 4, dtype=np.float32).reshape(k, 4) + i,
            np.arange(k, dtype=np.int32) + 10 * i,
        )

    pipe = Pipeline(batch_size=batch_size, num_threads=1, device_id=None)
    with pipe:
        outs = fn.external_source(source=sample, batch=False, num_outputs=3)
        pipe.set_outputs(*outs)
    return pipe


@pytest.mark.filterwarnings("ignore:set reader_name")
@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_ragged_iterator_dense_list_and_coo():
    it = DALIRaggedIterator(
        ragged_pipe(),
        ["image", "boxes", "labels"],
        output_types=[
            DALIRaggedIterator.DENSE_TAG,
            DALIRaggedIterator.SPARSE_LIST_TAG,
            DALIRaggedIterator.SPARSE_COO_TAG,
        ],
        size=7,
        last_batch_policy=LastBatchPolicy.PARTIAL,
    )
    seen = []
    for (batch,) in it:
        n = len(batch["boxes"])
        assert batch["image"].shape == (n, 2, 2) and batch["image"].dtype == torch.uint8
        coo = batch["labels"].coalesce()
        dense_labels = coo.to_dense()
        for j in range(n):
            i = int(batch["image"][j, 0, 0])
            k = i % 4
            box = batch["boxes"][j]
            assert box.dtype == torch.float32 and box.shape == (k, 4)
            np.testing.assert_array_equal(box.numpy(), np.arange(k * 4).reshape(k, 4) + i)
            if j < dense_labels.shape[0]:
                row = dense_labels[j, :k].numpy()
                np.testing.assert_array_equal(row, np.arange(k) + 10 * i)
            seen.append(i)
        sample_of = coo.indices()[0].tolist()
        want_values = [10 * i + r for i in seen[-n:] for r in range(i % 4)]
        assert coo.values().tolist() == want_values
        assert sample_of == [j for j, i in enumerate(seen[-n:]) for _ in range(i % 4)]
    assert seen == list(range(7))  # PARTIAL: the last batch cut to the epoch's sample


@pytest.mark.filterwarnings("ignore:set reader_name")
def test_ragged_iterator_defaults_to_dense_and_checks_tags():
    with pytest.raises(PipelineError, match="same shape"):  # all dense: ragged boxes fail
        DALIRaggedIterator(ragged_pipe(batch_size=2), ["image", "boxes", "labels"], 6)
    with pytest.raises(ArgumentError, match="'ragged' is not one of"):
        DALIRaggedIterator(ragged_pipe(), ["a", "b", "c"], output_types=["dense", "ragged", "x"])
    with pytest.raises(ArgumentError, match="2 tags for 3 outputs"):
        DALIRaggedIterator(ragged_pipe(), ["a", "b", "c"], output_types=["dense", "dense"])
