"""Automatic augmentations (DALI's ``nvidia.dali.auto_aug``): AutoAugment
(:mod:`~dlpipe.auto_aug.auto_augment`), RandAugment (:mod:`~dlpipe.auto_aug.rand_augment`)
and TrivialAugment (:mod:`~dlpipe.auto_aug.trivial_augment`), built from the
:mod:`~dlpipe.auto_aug.augmentations` with the tools of :mod:`~dlpipe.auto_aug.core`.

Each sample gets its own operations, picked at random per sample; the batch is split among
them by conditional execution (only the samples an augmentation was picked for run through
it), so a pipeline using them is declared with ``@pipeline_def(enable_conditionals=True)``.

Example:
    >>> from dlpipe.auto_aug import auto_augment
    >>> @pipeline_def(enable_conditionals=True)
    ... def train():
    ...     jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
    ...     images = fn.decoders.image(jpegs, device="mixed")
    ...     images = fn.resize(images, size=[224, 224])
    ...     return auto_augment.auto_augment_image_net(images, shape=[224, 224]), labels
"""
