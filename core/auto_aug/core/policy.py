"""``Policy``: AutoAugment's sub-policies (sequences of (augmentation, probability, magnitude))."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from ...errors import ArgumentError
from ._augmentation import Augmentation


class Policy:
    """An augmentation policy as in AutoAugment (https://arxiv.org/abs/1805.09501).

    For each sample one sub-policy is picked uniformly at random; its steps run in order, each
    with its own probability, at its magnitude bin.

    Args:
        name: the policy's name (for display).
        num_magnitude_bins: the number of bins the magnitude ranges are divided into.
        sub_policies: sequences of ``(augmentation, probability, magnitude_bin)``; the bin is
            ignored (may be None) for augmentations without a magnitude range.

    Raises:
        ArgumentError: a malformed sub-policy, a probability outside [0, 1] or a bin outside
            ``[0, num_magnitude_bins - 1]``.

    Example:
        >>> policy = Policy("mine", 11, [[(augmentations.rotate, 0.8, 7)],
        ...                                [(augmentations.equalize, 0.5, None)]])
        >>> images = auto_augment.apply_auto_augment(policy, images)
    """

    def __init__(self, name: str, num_magnitude_bins: int, sub_policies: Sequence[Sequence]):
        self.name = name
        self.num_magnitude_bins = num_magnitude_bins
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 1:
            raise ArgumentError(
                f"The `num_magnitude_bins` must be a positive integer, got {num_magnitude_bins}."
            )
        if not isinstance(sub_policies, list | tuple):
            raise ArgumentError(
                f"The `sub_policies` must be a list or tuple of sub policies, got "
                f"{type(sub_policies)}."
            )
        for sub_policy in sub_policies:
            if not isinstance(sub_policy, list | tuple):
                raise ArgumentError(f"Each sub policy must be a list or tuple, got {sub_policy}.")
            for op_desc in sub_policy:
                if not isinstance(op_desc, list | tuple) or len(op_desc) != 3:
                    raise ArgumentError(
                        "Each operation in sub policy must be specified as a triple: "
                        f"(augmentation, probability, magnitude). Got {op_desc}."
                    )
                aug, p, mag = op_desc
                if not isinstance(aug, Augmentation):
                    raise ArgumentError(
                        "Each augmentation in sub policies must be an instance of "
                        f"Augmentation. Got `{aug}`. Did you forget to use `@augmentation` "
                        "decorator?"
                    )
                if not isinstance(p, float | int) or not 0 <= p <= 1:
                    raise ArgumentError(
                        "Probability of applying the augmentation must be a number from "
                        f"`[0, 1]` range. Got `{p}` for augmentation `{aug.name}`."
                    )
                if p == 0:
                    warnings.warn(
                        f"The augmentation `{aug.name}` in policy `{name}` is used with "
                        "probability 0 in one of the sub-policies.",
                        stacklevel=2,
                    )
                if mag is None:
                    if aug.mag_range is not None:
                        raise ArgumentError(
                            f"The augmentation `{aug.name}` has `mag_range` specified, so the "
                            f"magnitude bin is required. However, got `None` in the policy "
                            f"`{name}`."
                        )
                    continue
                if aug.mag_range is None:
                    warnings.warn(
                        f"The magnitude bin `{mag}` for augmentation `{aug.name}` in policy "
                        f"`{name}` will be ignored. The augmentation does not accept magnitudes "
                        "(as it has no `mag_range` specified). You can specify `None` instead "
                        f"of `{mag}` to silence this warning.",
                        stacklevel=2,
                    )
                if not isinstance(mag, int) or not 0 <= mag < self.num_magnitude_bins:
                    raise ArgumentError(
                        "Magnitude of the augmentation must be an integer from "
                        f"`[0, {num_magnitude_bins - 1}]` range. Got `{mag}` for augmentation "
                        f"`{aug.name}`."
                    )
        self.sub_policies = _sub_policy_with_unique_names(sub_policies)

    @property
    def augmentations(self) -> dict:
        """name -> augmentation, every distinct augmentation of the policy, sorted by name."""
        augs = {aug for sub_policy in self.sub_policies for aug, _, _ in sub_policy}
        return {aug.name: aug for aug in sorted(augs, key=lambda a: a.name)}

    def __repr__(self) -> str:
        subs = ",\n\t".join(
            repr([(aug.name, p, mag) for aug, p, mag in sub]) for sub in self.sub_policies
        )
        augs = ",\n\t".join(f"'{name}': {aug!r}" for name, aug in self.augmentations.items())
        return (
            f"Policy(name={self.name!r}, num_magnitude_bins={self.num_magnitude_bins!r}, "
            f"sub_policies=[{chr(10) + chr(9) if subs else ''}{subs}], "
            f"augmentations={{{chr(10) + chr(9) if augs else ''}{augs}}})"
        )


def _sub_policy_with_unique_names(sub_policies) -> tuple:
    """The sub-policies as tuples; distinct augmentations sharing a name are renamed
    ``"<k>__<name>"`` (k in order of first use) so that the policy prints unambiguously."""
    every = [aug for sub in sub_policies for aug, _, _ in sub]
    distinct = set(every)
    if len({aug.name for aug in distinct}) == len(distinct):
        return tuple(tuple(sub) for sub in sub_policies)
    digits = len(str(len(distinct) - 1))
    renamed: dict = {}
    for aug in every:
        if aug not in renamed:
            renamed[aug] = aug.augmentation(name=f"{str(len(renamed)).zfill(digits)}__{aug.name}")
    return tuple(tuple((renamed[aug], p, mag) for aug, p, mag in sub) for sub in sub_policies)
