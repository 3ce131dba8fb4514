"""The PyTorch iterator resumes exactly from its checkpoints (the reusable check)."""

from __future__ import annotations

import pytest

from conftest import check_iterator_checkpoint_resumes
from dlpipe import Pipeline, fn

torch_plugin = pytest.importorskip("dlpipe.plugins.pytorch")
pytestmark = pytest.mark.torch


@pytest.mark.parametrize("stop", [0, 2, 5, 9])
def test_generic_iterator_resumes_exactly(image_root, stop):
    def make_pipes(checkpoints=None):
        pipe = Pipeline(
            batch_size=5,
            num_threads=2,
            seed=1,
            enable_checkpointing=True,
            checkpoint=None if checkpoints is None else checkpoints[0],
        )
        with pipe:
            jpegs, labels = fn.readers.file(
                file_root=image_root, random_shuffle=True, name="Reader"
            )
            images = fn.resize(fn.decoders.image_random_crop(jpegs), size=(8, 8))
            pipe.set_outputs(images, labels, fn.random.coin_flip())
        return [pipe]

    def make_iter(pipes):
        return torch_plugin.GenericIterator(
            pipes,
            ["data", "label", "flip"],
            reader_name="Reader",
            last_batch_policy=torch_plugin.LastBatchPolicy.PARTIAL,
        )

    check_iterator_checkpoint_resumes(make_pipes, make_iter, stop, 12)
