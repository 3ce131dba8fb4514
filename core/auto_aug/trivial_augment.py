"""TrivialAugment (https://arxiv.org/abs/2103.10158): per sample, one augmentation picked
uniformly at random from a suite, at a magnitude bin picked uniformly at random (DALI's
``nvidia.dali.auto_aug.trivial_augment``)."""

from __future__ import annotations

from .. import fn, types
from ..errors import ArgumentError
from ..graph import DataNode
from . import augmentations as a
from .core import _Augmentation, signed_bin
from .core._args import forbid_unused_kwargs as _forbid_unused_kwargs
from .core._utils import get_translations as _get_translations
from .core._utils import pretty_select as _pretty_select

__all__ = ["apply_trivial_augment", "get_trivial_augment_wide_suite", "trivial_augment_wide"]


def trivial_augment_wide(
    data: DataNode,
    num_magnitude_bins: int = 31,
    shape=None,
    fill_value: int | None = 128,
    interp_type=None,
    max_translate_abs=None,
    max_translate_rel=None,
    seed: int | None = None,
    excluded: list[str] | None = None,
) -> DataNode:
    """Apply TrivialAugment with the wide augmentation space.

    Args:
        data: HWC images or FHWC videos, uint8.
        num_magnitude_bins: the number of bins the magnitude ranges are divided into.
        shape: the (height, width) of the images (a pair or a per-sample node): translations
            are then relative (up to ``max_translate_rel``, default 1), else up to
            ``max_translate_abs`` pixels (default 32).
        fill_value, interp_type: padding and interpolation of the warps.
        max_translate_abs, max_translate_rel: the translation limits (one value or a pair).
        seed: the seed of the random choices.
        excluded: names of augmentations to leave out of the suite.

    Raises:
        ArgumentError: a name in ``excluded`` that is not in the suite.

    Example:
        >>> images = trivial_augment.trivial_augment_wide(images, shape=[224, 224])
    """
    aug_kwargs = {"fill_value": fill_value, "interp_type": interp_type}
    use_shape = shape is not None
    if use_shape:
        aug_kwargs["shape"] = shape
    augmentations = get_trivial_augment_wide_suite(
        use_shape=use_shape,
        max_translate_abs=max_translate_abs,
        max_translate_rel=max_translate_rel,
    )
    names = {aug.name for aug in augmentations}
    excluded = excluded or []
    for name in excluded:
        if name not in names:
            raise ArgumentError(
                f"The `{name}` was specified in `excluded`, but the TrivialAugmentWide suite "
                "does not contain augmentation with this name. The augmentations in the suite "
                f"are: {', '.join(aug.name for aug in augmentations)}."
            )
    selected = [aug for aug in augmentations if aug.name not in excluded]
    return apply_trivial_augment(
        selected, data, num_magnitude_bins=num_magnitude_bins, seed=seed, **aug_kwargs
    )


def apply_trivial_augment(
    augmentations: list[_Augmentation],
    data: DataNode,
    num_magnitude_bins: int = 31,
    seed: int | None = None,
    **kwargs,
) -> DataNode:
    """Apply ``augmentations`` TrivialAugment's way: one per sample, at a random bin.

    Args:
        augmentations: the suite to pick from.
        data: the batch.
        num_magnitude_bins: the number of bins.
        seed: the seed of the random choices.
        **kwargs: extra arguments for the augmentations (``shape``, ``fill_value``, ...).

    Raises:
        ArgumentError: a bad ``num_magnitude_bins``, an empty suite, or a keyword argument no
            augmentation takes.
    """
    if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
        raise ArgumentError(
            f"The `num_magnitude_bins` must be a positive integer, got {num_magnitude_bins}."
        )
    if len(augmentations) == 0:
        raise ArgumentError(
            "The `augmentations` list cannot be empty. Got empty list in "
            "`apply_trivial_augment` call."
        )
    magnitude_bin = fn.random.uniform(
        values=list(range(num_magnitude_bins)), dtype=types.INT32, seed=seed
    )
    if any(aug.randomly_negate for aug in augmentations):
        magnitude_bin = signed_bin(magnitude_bin, seed=seed)
    _forbid_unused_kwargs(augmentations, kwargs, "apply_trivial_augment")
    op_kwargs = dict(
        data=data, magnitude_bin=magnitude_bin, num_magnitude_bins=num_magnitude_bins, **kwargs
    )
    op_idx = fn.random.uniform(values=list(range(len(augmentations))), seed=seed, dtype=types.INT32)
    return _pretty_select(
        augmentations,
        op_idx,
        op_kwargs,
        auto_aug_name="apply_trivial_augment",
        ref_suite_name="get_trivial_augment_wide_suite",
    )


def get_trivial_augment_wide_suite(
    use_shape: bool = False, max_translate_abs=None, max_translate_rel=None
) -> list[_Augmentation]:
    """The 14 augmentations of TrivialAugment's wide space.

    Args:
        use_shape: translations relative to the image shape (``max_translate_rel``, default
            1) instead of in pixels (``max_translate_abs``, default 32).
        max_translate_abs, max_translate_rel: the translation limits (one value or a pair).
    """
    translations = _get_translations(use_shape, 32, 1.0, max_translate_abs, max_translate_rel)
    return translations + [
        a.shear_x.augmentation((0, 0.99), True),
        a.shear_y.augmentation((0, 0.99), True),
        a.rotate.augmentation((0, 135), True),
        a.brightness.augmentation((0.01, 0.99), True, a.shift_enhance_range),
        a.contrast.augmentation((0.01, 0.99), True, a.shift_enhance_range),
        a.color.augmentation((0.01, 0.99), True, a.shift_enhance_range),
        a.sharpness.augmentation((0.01, 0.99), True, a.sharpness_kernel),
        a.posterize.augmentation((8, 2), False, a.poster_mask_uint8),
        # the solarization threshold falls as the bin rises: stronger
        a.solarize.augmentation((256, 0)),
        a.equalize,
        a.auto_contrast,
        a.identity,
    ]
