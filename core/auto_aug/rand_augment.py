"""RandAugment (https://arxiv.org/abs/1909.13719): per sample, ``n`` augmentations picked
uniformly at random from a suite, applied in sequence at magnitude bin ``m`` (DALI's
``nvidia.dali.auto_aug.rand_augment``)."""

from __future__ import annotations

import warnings

from .. import fn, types
from ..errors import ArgumentError
from ..graph import DataNode
from . import augmentations as a
from .core import _Augmentation, signed_bin
from .core._args import forbid_unused_kwargs as _forbid_unused_kwargs
from .core._utils import get_translations as _get_translations
from .core._utils import pretty_select as _pretty_select

__all__ = [
    "apply_rand_augment",
    "get_rand_augment_non_monotonic_suite",
    "get_rand_augment_suite",
    "rand_augment",
]


def rand_augment(
    data: DataNode,
    n: int,
    m: int,
    num_magnitude_bins: int = 31,
    shape=None,
    fill_value: int | None = 128,
    interp_type=None,
    max_translate_abs=None,
    max_translate_rel=None,
    seed: int | None = None,
    monotonic_mag: bool = True,
    excluded: list[str] | None = None,
) -> DataNode:
    """Apply RandAugment with the standard suite.

    Args:
        data: HWC images or FHWC videos, uint8.
        n: how many augmentations each sample goes through.
        m: the magnitude bin of every augmentation, in ``[0, num_magnitude_bins - 1]``.
        num_magnitude_bins: the number of bins the magnitude ranges are divided into.
        shape: the (height, width) of the images (a pair or a per-sample node): translations
            are then relative (up to ``max_translate_rel``, default 100/224 of it), else up to
            ``max_translate_abs`` pixels (default 100).
        fill_value, interp_type: padding and interpolation of the warps (see
            :func:`~dlpipe.auto_aug.auto_augment.auto_augment`).
        max_translate_abs, max_translate_rel: the translation limits (one value or a pair).
        seed: the seed of the random choices.
        monotonic_mag: True: every augmentation gets stronger with the bin
            (:func:`get_rand_augment_suite`); False: the color operations use AutoAugment's
            ranges (:func:`get_rand_augment_non_monotonic_suite`).
        excluded: names of augmentations to leave out of the suite.

    Raises:
        ArgumentError: a name in ``excluded`` that is not in the suite, or a bad ``n``/``m``.

    Example:
        >>> images = rand_augment.rand_augment(images, n=2, m=9, shape=[224, 224])
    """
    aug_kwargs = {"fill_value": fill_value, "interp_type": interp_type}
    use_shape = shape is not None
    if use_shape:
        aug_kwargs["shape"] = shape
    suite = get_rand_augment_suite if monotonic_mag else get_rand_augment_non_monotonic_suite
    augmentations = suite(use_shape, max_translate_abs, max_translate_rel)
    names = {aug.name for aug in augmentations}
    excluded = excluded or []
    for name in excluded:
        if name not in names:
            raise ArgumentError(
                f"The `{name}` was specified in `excluded`, but the RandAugment suite does not "
                "contain augmentation with this name. The augmentations in the suite are: "
                f"{', '.join(aug.name for aug in augmentations)}."
            )
    selected = [aug for aug in augmentations if aug.name not in excluded]
    return apply_rand_augment(
        selected, data, n, m, num_magnitude_bins=num_magnitude_bins, seed=seed, **aug_kwargs
    )


def apply_rand_augment(
    augmentations: list[_Augmentation],
    data: DataNode,
    n: int,
    m: int,
    num_magnitude_bins: int = 31,
    seed: int | None = None,
    **kwargs,
) -> DataNode:
    """Apply ``augmentations`` RandAugment's way: ``n`` picked per sample, in sequence, all at
    magnitude bin ``m``.

    Args:
        augmentations: the suite to pick from.
        data: the batch.
        n: how many augmentations each sample goes through (0: none, with a warning).
        m: the magnitude bin, in ``[0, num_magnitude_bins - 1]``.
        num_magnitude_bins: the number of bins.
        seed: the seed of the random choices.
        **kwargs: extra arguments for the augmentations (``shape``, ``fill_value``, ...).

    Raises:
        ArgumentError: a bad ``n``, ``m`` or ``num_magnitude_bins``, an empty suite, or a
            keyword argument no augmentation takes.
    """
    if not isinstance(n, int) or n < 0:
        raise ArgumentError(
            f"The number of operations to apply `n` must be a non-negative integer, got {n}."
        )
    if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
        raise ArgumentError(
            f"The `num_magnitude_bins` must be a positive integer, got {num_magnitude_bins}."
        )
    if not isinstance(m, int) or not 0 <= m < num_magnitude_bins:
        raise ArgumentError(
            "The magnitude bin `m` must be an integer from "
            f"`[0, {num_magnitude_bins - 1}]` range. Got {m}."
        )
    if n == 0:
        warnings.warn(
            "The `apply_rand_augment` was called with `n=0`, no augmentation will be applied.",
            Warning,
            stacklevel=2,
        )
        return data
    if len(augmentations) == 0:
        raise ArgumentError(
            "The `augmentations` list cannot be empty, unless n=0. Got empty list in "
            "`apply_rand_augment` call."
        )
    shape = () if n == 1 else (n,)
    op_idx = fn.random.uniform(
        values=list(range(len(augmentations))), seed=seed, shape=shape, dtype=types.INT32
    )
    use_signed = any(aug.randomly_negate for aug in augmentations)
    mag_bin = signed_bin(m, seed=seed, shape=shape) if use_signed else m
    _forbid_unused_kwargs(augmentations, kwargs, "apply_rand_augment")
    for level in range(n):
        level_mag_bin = mag_bin if not use_signed or n == 1 else mag_bin[level]
        op_kwargs = dict(
            data=data, magnitude_bin=level_mag_bin, num_magnitude_bins=num_magnitude_bins, **kwargs
        )
        level_op_idx = op_idx if n == 1 else op_idx[level]
        data = _pretty_select(
            augmentations,
            level_op_idx,
            op_kwargs,
            auto_aug_name="apply_rand_augment",
            ref_suite_name="get_rand_augment_suite",
        )
    return data


def get_rand_augment_suite(
    use_shape: bool = False, max_translate_abs=None, max_translate_rel=None
) -> list[_Augmentation]:
    """The RandAugment suite, every augmentation stronger with a higher bin.

    Args:
        use_shape: translations relative to the image shape (``max_translate_rel``, default
            100/224) instead of in pixels (``max_translate_abs``, default 100).
        max_translate_abs, max_translate_rel: the translation limits (one value or a pair).
    """
    translations = _get_translations(
        use_shape, 100, 100 / 224, max_translate_abs, max_translate_rel
    )
    return translations + [
        a.shear_x.augmentation((0, 0.3), True),
        a.shear_y.augmentation((0, 0.3), True),
        a.rotate.augmentation((0, 30), True),
        a.brightness.augmentation((0, 0.9), True, a.shift_enhance_range),
        a.contrast.augmentation((0, 0.9), True, a.shift_enhance_range),
        a.color.augmentation((0, 0.9), True, a.shift_enhance_range),
        a.sharpness.augmentation((0, 0.9), True, a.sharpness_kernel),
        a.posterize.augmentation((8, 4), False, a.poster_mask_uint8),
        # the solarization threshold falls as the bin rises: stronger
        a.solarize.augmentation((256, 0)),
        a.equalize,
        a.auto_contrast,
        a.identity,
    ]


def get_rand_augment_non_monotonic_suite(
    use_shape: bool = False, max_translate_abs=None, max_translate_rel=None
) -> list[_Augmentation]:
    """The RandAugment suite with AutoAugment's ranges for brightness, contrast, color,
    sharpness, posterize and solarize (their strength is not monotonic in the bin)."""
    translations = _get_translations(
        use_shape, 100, 100 / 224, max_translate_abs, max_translate_rel
    )
    return translations + [
        a.shear_x.augmentation((0, 0.3), True),
        a.shear_y.augmentation((0, 0.3), True),
        a.rotate.augmentation((0, 30), True),
        a.brightness.augmentation((0.1, 1.9), False, None),
        a.contrast.augmentation((0.1, 1.9), False, None),
        a.color.augmentation((0.1, 1.9), False, None),
        a.sharpness.augmentation((0.1, 1.9), False, a.sharpness_kernel_shifted),
        a.posterize.augmentation((0, 4), False, a.poster_mask_uint8),
        a.solarize.augmentation((0, 256), False, None),
        a.equalize,
        a.auto_contrast,
        a.identity,
    ]
