"""Checkpoints of a GPU pipeline resume exactly: the GPU operators' random numbers are drawn
on the CPU stage, so the snapshot of an iteration covers them."""

from __future__ import annotations

import pytest

from conftest import check_checkpoint_resumes
from dlpipe import Pipeline, fn

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("stop", [0, 3])
def test_mixed_random_crop_pipeline_resumes_exactly(image_root, stop):
    def make(checkpoint=None):
        pipe = Pipeline(
            batch_size=4,
            num_threads=2,
            device_id=0,
            seed=3,
            enable_checkpointing=True,
            checkpoint=checkpoint,
        )
        with pipe:
            jpegs, labels = fn.readers.file(file_root=image_root, random_shuffle=True)
            images = fn.decoders.image_random_crop(jpegs, device="mixed")
            images = fn.resize(images, size=(16, 16))
            pipe.set_outputs(images, labels, fn.random.coin_flip())
        return pipe

    check_checkpoint_resumes(make, stop, 6)
