"""AutoAugment (https://arxiv.org/abs/1805.09501): per sample, one sub-policy of a
:class:`~dlpipe.auto_aug.core.Policy` picked at random, its steps applied in order, each with
its probability (DALI's ``nvidia.dali.auto_aug.auto_augment``)."""

from __future__ import annotations

import numpy as np

from .. import fn, types
from ..errors import ArgumentError
from ..graph import DataNode
from . import augmentations as a
from .core import Policy, _Augmentation, signed_bin
from .core._args import forbid_unused_kwargs as _forbid_unused_kwargs
from .core._select import cond as _cond
from .core._utils import get_translations as _get_translations
from .core._utils import pretty_select as _pretty_select

__all__ = [
    "apply_auto_augment",
    "auto_augment",
    "auto_augment_image_net",
    "get_image_net_policy",
    "get_reduced_cifar10_policy",
    "get_reduced_image_net_policy",
    "get_svhn_policy",
]


def auto_augment(
    data: DataNode,
    policy_name: str = "image_net",
    shape=None,
    fill_value: int | None = 128,
    interp_type=None,
    max_translate_abs=None,
    max_translate_rel=None,
    seed: int | None = None,
) -> DataNode:
    """Apply one of the AutoAugment paper's policies to a batch.

    Args:
        data: HWC images or FHWC videos, uint8.
        policy_name: ``"image_net"`` (default), ``"reduced_image_net"``, ``"svhn"`` or
            ``"reduced_cifar10"``.
        shape: the (height, width) of the images (a pair or a per-sample node): translations
            are then relative, up to ``max_translate_rel`` of it; without it they are up to
            ``max_translate_abs`` pixels.
        fill_value: the padding of the warped images (translations, shears, rotation); None
            repeats the border.
        interp_type: their interpolation (linear by default, or ``types.INTERP_NN``).
        max_translate_abs: the largest shift in pixels (one value or (height, width));
            default 250. Only without ``shape``.
        max_translate_rel: the largest shift as a fraction of the shape (one value or a
            pair); default 1. Only with ``shape``.
        seed: the seed of the random choices (sub-policies, probabilities, signs).

    Returns:
        The augmented batch.

    Raises:
        ArgumentError: an unknown policy, or shape arguments for a policy without
            translations.
    """
    predefined = {
        "image_net": get_image_net_policy,
        "reduced_image_net": get_reduced_image_net_policy,
        "svhn": get_svhn_policy,
        "reduced_cifar10": get_reduced_cifar10_policy,
    }
    without_translation = ("reduced_image_net",)
    shape_args = (
        (shape, "shape"),
        (max_translate_abs, "max_translate_abs"),
        (max_translate_rel, "max_translate_rel"),
    )
    if not isinstance(policy_name, str) or policy_name not in predefined:
        names = ", ".join(f"`{name}`" for name in predefined)
        raise ArgumentError(
            f"The `policy_name` must be a string that takes one of the values: {names}"
        )
    if policy_name in without_translation:
        given = next((name for arg, name in shape_args if arg is not None), None)
        if given is not None:
            raise ArgumentError(
                f"The policy `{policy_name}` does not contain any augmentations that rely on "
                f"the image shape. The `{given}` argument must not be specified in that case."
            )
    aug_kwargs = {"fill_value": fill_value, "interp_type": interp_type}
    use_shape = shape is not None
    if use_shape:
        aug_kwargs["shape"] = shape
    if policy_name in without_translation:
        policy = predefined[policy_name]()
    else:
        policy = predefined[policy_name](
            use_shape=use_shape,
            max_translate_abs=max_translate_abs,
            max_translate_rel=max_translate_rel,
        )
    return apply_auto_augment(policy, data, seed, **aug_kwargs)


def auto_augment_image_net(
    data: DataNode,
    shape=None,
    fill_value: int | None = 128,
    interp_type=None,
    max_translate_abs=None,
    max_translate_rel=None,
    seed: int | None = None,
) -> DataNode:
    """:func:`auto_augment` with the ImageNet policy."""
    return auto_augment(
        data,
        "image_net",
        shape,
        fill_value,
        interp_type,
        max_translate_abs,
        max_translate_rel,
        seed,
    )


def apply_auto_augment(policy: Policy, data: DataNode, seed: int | None = None, **kwargs):
    """Apply a policy AutoAugment's way: per sample a random sub-policy, its steps in order,
    each run with its probability.

    Args:
        policy: the policy.
        data: the batch.
        seed: the seed of the random choices.
        **kwargs: extra arguments for the augmentations (each gets those its op names:
            ``shape``, ``fill_value``, ``interp_type`` for the standard suite).

    Raises:
        ArgumentError: an empty policy, or a keyword argument no augmentation takes.
    """
    if len(policy.sub_policies) == 0:
        raise ArgumentError(f"Cannot run empty policy. Got {policy} in `apply_auto_augment` call.")
    max_policy_len = max(len(sub_policy) for sub_policy in policy.sub_policies)
    should_run = fn.random.uniform(
        range=[0, 1], shape=(max_policy_len,), dtype=types.FLOAT, seed=seed
    )
    sub_policy_id = fn.random.uniform(
        values=list(range(len(policy.sub_policies))), seed=seed, dtype=types.INT32
    )
    run_probabilities = _sub_policy_to_probability_map(policy)[sub_policy_id]
    magnitude_bins = _sub_policy_to_magnitude_bin_map(policy)[sub_policy_id]
    aug_ids, augmentations = _sub_policy_to_augmentation_map(policy)
    aug_ids = aug_ids[sub_policy_id]
    if any(aug.randomly_negate for aug in policy.augmentations.values()):
        magnitude_bins = signed_bin(magnitude_bins, seed=seed, shape=(max_policy_len,))
    _forbid_unused_kwargs(policy.augmentations.values(), kwargs, "apply_auto_augment")
    for stage_id in range(max_policy_len):

        def run_stage(data=data, stage_id=stage_id):
            op_kwargs = dict(
                data=data,
                magnitude_bin=magnitude_bins[stage_id],
                num_magnitude_bins=policy.num_magnitude_bins,
                **kwargs,
            )
            return _pretty_select(
                augmentations[stage_id],
                aug_ids[stage_id],
                op_kwargs,
                auto_aug_name="apply_auto_augment",
                ref_suite_name="get_image_net_policy",
            )

        data = _cond(
            should_run[stage_id] < run_probabilities[stage_id], run_stage, lambda d=data: d
        )
    return data


def get_image_net_policy(
    use_shape: bool = False, max_translate_abs=None, max_translate_rel=None
) -> Policy:
    """The policy the AutoAugment paper found for ImageNet.

    Args:
        use_shape: translations relative to the image shape (``max_translate_rel``, default
            1) instead of in pixels (``max_translate_abs``, default 250).
        max_translate_abs: the largest shift in pixels (one value or (height, width)).
        max_translate_rel: the largest shift as a fraction of the shape.
    """
    _, translate_y = _get_translations(use_shape, 250, 1.0, max_translate_abs, max_translate_rel)
    shear_x = a.shear_x.augmentation((0, 0.3), True)
    shear_y = a.shear_y.augmentation((0, 0.3), True)
    rotate = a.rotate.augmentation((0, 30), True)
    color = a.color.augmentation((0.1, 1.9), False, None)
    posterize = a.posterize.augmentation((0, 4), False, a.poster_mask_uint8)
    solarize = a.solarize.augmentation((0, 256), False)
    solarize_add = a.solarize_add.augmentation((0, 110), False)
    invert, equalize, auto_contrast = a.invert, a.equalize, a.auto_contrast
    return Policy(
        name="ImageNetPolicy",
        num_magnitude_bins=11,
        sub_policies=[
            [(equalize, 0.8, None), (shear_y, 0.8, 4)],
            [(color, 0.4, 9), (equalize, 0.6, None)],
            [(color, 0.4, 1), (rotate, 0.6, 8)],
            [(solarize, 0.8, 3), (equalize, 0.4, None)],
            [(solarize, 0.4, 2), (solarize, 0.6, 2)],
            [(color, 0.2, 0), (equalize, 0.8, None)],
            [(equalize, 0.4, None), (solarize_add, 0.8, 3)],
            [(shear_x, 0.2, 9), (rotate, 0.6, 8)],
            [(color, 0.6, 1), (equalize, 1.0, None)],
            [(invert, 0.4, None), (rotate, 0.6, 0)],
            [(equalize, 1.0, None), (shear_y, 0.6, 3)],
            [(color, 0.4, 7), (equalize, 0.6, None)],
            [(posterize, 0.4, 6), (auto_contrast, 0.4, None)],
            [(solarize, 0.6, 8), (color, 0.6, 9)],
            [(solarize, 0.2, 4), (rotate, 0.8, 9)],
            [(rotate, 1.0, 7), (translate_y, 0.8, 9)],
            [(solarize, 0.8, 4)],
            [(shear_y, 0.8, 0), (color, 0.6, 4)],
            [(color, 1.0, 0), (rotate, 0.6, 2)],
            [(equalize, 0.8, None)],
            [(equalize, 1.0, None), (auto_contrast, 0.6, None)],
            [(shear_y, 0.4, 7), (solarize_add, 0.6, 7)],
            [(posterize, 0.8, 2), (solarize, 0.6, 10)],
            [(solarize, 0.6, 8), (equalize, 0.6, None)],
            [(color, 0.8, 6), (rotate, 0.4, 5)],
        ],
    )


def get_reduced_cifar10_policy(
    use_shape: bool = False, max_translate_abs=None, max_translate_rel=None
) -> Policy:
    """The policy the AutoAugment paper found for reduced CIFAR-10 (arguments as in
    :func:`get_image_net_policy`)."""
    translate_x, translate_y = _get_translations(
        use_shape, 250, 1.0, max_translate_abs, max_translate_rel
    )
    shear_y = a.shear_y.augmentation((0, 0.3), True)
    rotate = a.rotate.augmentation((0, 30), True)
    brightness = a.brightness.augmentation((0.1, 1.9), False, None)
    color = a.color.augmentation((0.1, 1.9), False, None)
    contrast = a.contrast.augmentation((0.1, 1.9), False, None)
    sharpness = a.sharpness.augmentation((0.1, 1.9), False, a.sharpness_kernel_shifted)
    posterize = a.posterize.augmentation((0, 4), False, a.poster_mask_uint8)
    solarize = a.solarize.augmentation((0, 256), False)
    invert, equalize, auto_contrast = a.invert, a.equalize, a.auto_contrast
    return Policy(
        name="ReducedCifar10Policy",
        num_magnitude_bins=11,
        sub_policies=[
            [(invert, 0.1, None), (contrast, 0.2, 6)],
            [(rotate, 0.7, 2), (translate_x, 0.3, 9)],
            [(sharpness, 0.8, 1), (sharpness, 0.9, 3)],
            [(shear_y, 0.5, 8), (translate_y, 0.7, 9)],
            [(auto_contrast, 0.5, None), (equalize, 0.9, None)],
            [(shear_y, 0.2, 7), (posterize, 0.3, 7)],
            [(color, 0.4, 3), (brightness, 0.6, 7)],
            [(sharpness, 0.3, 9), (brightness, 0.7, 9)],
            [(equalize, 0.6, None), (equalize, 0.5, None)],
            [(contrast, 0.6, 7), (sharpness, 0.6, 5)],
            [(color, 0.7, 7), (translate_x, 0.5, 8)],
            [(equalize, 0.3, None), (auto_contrast, 0.4, None)],
            [(translate_y, 0.4, 3), (sharpness, 0.2, 6)],
            [(brightness, 0.9, 6), (color, 0.2, 8)],
            [(solarize, 0.5, 2)],
            [(equalize, 0.2, None), (auto_contrast, 0.6, None)],
            [(equalize, 0.2, None), (equalize, 0.6, None)],
            [(color, 0.9, 9), (equalize, 0.6, None)],
            [(auto_contrast, 0.8, None), (solarize, 0.2, 8)],
            [(brightness, 0.1, 3), (color, 0.7, 0)],
            [(solarize, 0.4, 5), (auto_contrast, 0.9, None)],
            [(translate_y, 0.9, 9), (translate_y, 0.7, 9)],
            [(auto_contrast, 0.9, None), (solarize, 0.8, 3)],
            [(equalize, 0.8, None), (invert, 0.1, None)],
            [(translate_y, 0.7, 9), (auto_contrast, 0.9, None)],
        ],
    )


def get_svhn_policy(
    use_shape: bool = False, max_translate_abs=None, max_translate_rel=None
) -> Policy:
    """The policy the AutoAugment paper found for SVHN (arguments as in
    :func:`get_image_net_policy`)."""
    translate_x, translate_y = _get_translations(
        use_shape, 250, 1.0, max_translate_abs, max_translate_rel
    )
    shear_x = a.shear_x.augmentation((0, 0.3), True)
    shear_y = a.shear_y.augmentation((0, 0.3), True)
    rotate = a.rotate.augmentation((0, 30), True)
    contrast = a.contrast.augmentation((0.1, 1.9), False, None)
    solarize = a.solarize.augmentation((0, 256), False)
    invert, equalize, auto_contrast = a.invert, a.equalize, a.auto_contrast
    return Policy(
        name="SvhnPolicy",
        num_magnitude_bins=11,
        sub_policies=[
            [(shear_x, 0.9, 4), (invert, 0.2, None)],
            [(shear_y, 0.9, 8), (invert, 0.7, None)],
            [(equalize, 0.6, None), (solarize, 0.6, 6)],
            [(invert, 0.9, None), (equalize, 0.6, None)],
            [(equalize, 0.6, None), (rotate, 0.9, 3)],
            [(shear_x, 0.9, 4), (auto_contrast, 0.8, None)],
            [(shear_y, 0.9, 8), (invert, 0.4, None)],
            [(shear_y, 0.9, 5), (solarize, 0.2, 6)],
            [(invert, 0.9, None), (auto_contrast, 0.8, None)],
            [(equalize, 0.6, None), (rotate, 0.9, 3)],
            [(shear_x, 0.9, 4), (solarize, 0.3, 3)],
            [(shear_y, 0.8, 8), (invert, 0.7, None)],
            [(equalize, 0.9, None), (translate_y, 0.6, 6)],
            [(invert, 0.9, None), (equalize, 0.6, None)],
            [(contrast, 0.3, 3), (rotate, 0.8, 4)],
            [(invert, 0.8, None)],
            [(shear_y, 0.7, 6), (solarize, 0.4, 8)],
            [(invert, 0.6, None), (rotate, 0.8, 4)],
            [(shear_y, 0.3, 7), (translate_x, 0.9, 3)],
            [(shear_x, 0.1, 6), (invert, 0.6, None)],
            [(solarize, 0.7, 2), (translate_y, 0.6, 7)],
            [(shear_y, 0.8, 4), (invert, 0.8, None)],
            [(shear_x, 0.7, 9), (translate_y, 0.8, 3)],
            [(shear_y, 0.8, 5), (auto_contrast, 0.7, None)],
            [(shear_x, 0.7, 2), (invert, 0.1, None)],
        ],
    )


def get_reduced_image_net_policy() -> Policy:
    """The policy the AutoAugment paper found for reduced ImageNet (no translations)."""
    shear_x = a.shear_x.augmentation((0, 0.3), True)
    rotate = a.rotate.augmentation((0, 30), True)
    color = a.color.augmentation((0.1, 1.9), False, None)
    contrast = a.contrast.augmentation((0.1, 1.9), False, None)
    sharpness = a.sharpness.augmentation((0.1, 1.9), False, a.sharpness_kernel_shifted)
    posterize = a.posterize.augmentation((0, 4), False, a.poster_mask_uint8)
    solarize = a.solarize.augmentation((0, 256), False)
    invert, equalize, auto_contrast = a.invert, a.equalize, a.auto_contrast
    return Policy(
        name="ReducedImageNetPolicy",
        num_magnitude_bins=11,
        sub_policies=[
            [(posterize, 0.4, 8), (rotate, 0.6, 9)],
            [(solarize, 0.6, 5), (auto_contrast, 0.6, None)],
            [(equalize, 0.8, None), (equalize, 0.6, None)],
            [(posterize, 0.6, 7), (posterize, 0.6, 6)],
            [(equalize, 0.4, None), (solarize, 0.2, 4)],
            [(equalize, 0.4, None), (rotate, 0.8, 8)],
            [(solarize, 0.6, 3), (equalize, 0.6, None)],
            [(posterize, 0.8, 5), (equalize, 1.0, None)],
            [(rotate, 0.2, 3), (solarize, 0.6, 8)],
            [(equalize, 0.6, None), (posterize, 0.4, 6)],
            [(rotate, 0.8, 8), (color, 0.4, 0)],
            [(rotate, 0.4, 9), (equalize, 0.6, None)],
            [(equalize, 0.8, None)],
            [(invert, 0.6, None), (equalize, 1.0, None)],
            [(color, 0.6, 4), (contrast, 1.0, 8)],
            [(rotate, 0.8, 8), (color, 1.0, 2)],
            [(color, 0.8, 8), (solarize, 0.8, 7)],
            [(sharpness, 0.4, 7), (invert, 0.6, None)],
            [(shear_x, 0.6, 5), (equalize, 1.0, None)],
            [(color, 0.4, 0), (equalize, 0.6, None)],
            [(equalize, 0.4, None), (solarize, 0.2, 4)],
            [(solarize, 0.6, 5), (auto_contrast, 0.6, None)],
            [(invert, 0.6, None), (equalize, 1.0, None)],
            [(color, 0.6, 4), (contrast, 1.0, 8)],
            [(equalize, 0.8, None), (equalize, 0.6, None)],
        ],
    )


# --- the policy as lookup tables, indexed per sample by the sub-policy drawn -------------------


def _max_len(policy: Policy) -> int:
    return max(len(sub_policy) for sub_policy in policy.sub_policies)


def _sub_policy_to_probability_map(policy: Policy) -> DataNode:
    """(sub-policy, stage) -> probability of running that stage (0 past its end)."""
    prob = np.zeros((len(policy.sub_policies), _max_len(policy)), np.float32)
    for i, sub_policy in enumerate(policy.sub_policies):
        for stage, (_, p, _) in enumerate(sub_policy):
            prob[i, stage] = p
    return types.Constant(prob)


def _sub_policy_to_magnitude_bin_map(policy: Policy) -> DataNode:
    """(sub-policy, stage) -> magnitude bin (a dummy -999 where the augmentation has none)."""
    bins = np.zeros((len(policy.sub_policies), _max_len(policy)), np.int32)
    for i, sub_policy in enumerate(policy.sub_policies):
        for stage, (_, _, mag) in enumerate(sub_policy):
            bins[i, stage] = mag if mag is not None else -999
    return types.Constant(bins)


def _sub_policy_to_augmentation_matrix_map(policy: Policy) -> tuple[np.ndarray, list]:
    """(m, augments): ``augments[stage]`` lists the distinct augmentations used at that stage
    (in order of first use) plus ``identity`` last; ``m[sub_policy, stage]`` is the index in
    that list (identity past a sub-policy's end)."""
    sub_policies = policy.sub_policies
    max_len = _max_len(policy)
    augments: list[list[_Augmentation]] = []
    for stage in range(max_len):
        stage_augs: list = []
        for sub_policy in sub_policies:
            if stage < len(sub_policy) and sub_policy[stage][0] not in stage_augs:
                stage_augs.append(sub_policy[stage][0])
        augments.append([*stage_augs, a.identity])
    m = np.array([[len(augs) - 1 for augs in augments]] * len(sub_policies), np.int32)
    for i, sub_policy in enumerate(sub_policies):
        for stage, (aug, _, _) in enumerate(sub_policy):
            m[i, stage] = augments[stage].index(aug)
    return m, augments


def _sub_policy_to_augmentation_map(policy: Policy) -> tuple[DataNode, list]:
    m, augments = _sub_policy_to_augmentation_matrix_map(policy)
    return types.Constant(m), augments
