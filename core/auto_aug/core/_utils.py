"""Shared by the automatic augmentations: translation ranges and ``select`` with a clearer
error for a missing image shape."""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import ArgumentError
from ._args import MissingArgException
from ._select import select


def max_translate_hw(max_translate) -> tuple:
    """(height, width) limits from one value or a pair."""
    if isinstance(max_translate, tuple | list):
        height, width = max_translate
        return height, width
    return max_translate, max_translate


def parse_validate_offset(
    use_shape,
    max_translate_abs=None,
    max_translate_rel=None,
    default_translate_abs=250,
    default_translate_rel=1.0,
) -> tuple:
    """The (height, width) translation limits: relative to the image shape (``use_shape``)
    or in pixels.

    Raises:
        ArgumentError: ``use_shape`` is not a bool, or the limit of the other kind is given.
    """
    if not isinstance(use_shape, bool):
        raise ArgumentError(
            "The `use_shape` is a flag that should be set to either True or False, "
            f"got {use_shape}."
        )
    if use_shape:
        if max_translate_abs is not None:
            raise ArgumentError(
                "The argument `max_translate_abs` cannot be used with image shapes. "
                "You may use `max_translate_rel` instead."
            )
        return max_translate_hw(
            default_translate_rel if max_translate_rel is None else max_translate_rel
        )
    if max_translate_rel is not None:
        raise ArgumentError(
            "The argument `max_translate_rel` cannot be used without image shapes. "
            "You may use `max_translate_abs` instead."
        )
    return max_translate_hw(
        default_translate_abs if max_translate_abs is None else max_translate_abs
    )


def get_translations(
    use_shape: bool,
    default_translate_abs,
    default_translate_rel,
    max_translate_abs=None,
    max_translate_rel=None,
) -> list:
    """[translate_x, translate_y] with their magnitude ranges set: relative to the shape
    (``translate_x``/``translate_y``) or absolute (``translate_x_no_shape``/...)."""
    from .. import augmentations as a

    height, width = parse_validate_offset(
        use_shape,
        max_translate_abs=max_translate_abs,
        max_translate_rel=max_translate_rel,
        default_translate_abs=default_translate_abs,
        default_translate_rel=default_translate_rel,
    )
    if use_shape:
        return [
            a.translate_x.augmentation((0, width), True),
            a.translate_y.augmentation((0, height), True),
        ]
    return [
        a.translate_x_no_shape.augmentation((0, width), True),
        a.translate_y_no_shape.augmentation((0, height), True),
    ]


def pretty_select(
    augmentations: Sequence, aug_ids, op_kwargs: dict, auto_aug_name: str, ref_suite_name: str
):
    """``select(augmentations, aug_ids, **op_kwargs)``, explaining a missing ``shape``."""
    from .. import augmentations as a

    try:
        return select(augmentations, aug_ids, **op_kwargs)
    except MissingArgException as e:
        if e.missing_args != ["shape"] or e.augmentation.op not in (
            a.translate_x.op,
            a.translate_y.op,
        ):
            raise
        raise ArgumentError(
            f"The augmentation `{e.augmentation.name}` requires `shape` argument that "
            "describes image shape (in HWC layout). Please provide it as `shape` argument "
            f"to `{auto_aug_name}` call. You can get the image shape from encoded images "
            "with `fn.peek_image_shape`. Alternatively, you can use "
            "`translate_x_no_shape`/`translate_y_no_shape` that does not rely on image "
            f"shape, but uses offset from fixed range: for reference see `{ref_suite_name}` "
            "and its `use_shape` argument. "
        ) from None
