"""The standard augmentations of AutoAugment (ImageNet policy), RandAugment and
TrivialAugmentWide, built from dlpipe operators (DALI's ``nvidia.dali.auto_aug.augmentations``).

Each is an :class:`~dlpipe.auto_aug.core._Augmentation`: called with a batch (HWC images or
FHWC videos of uint8), a ``magnitude_bin`` and ``num_magnitude_bins``, it computes its
parameter as ``mag_to_param(magnitudes[bin] * (-1) ** random_sign)`` with
``magnitudes = linspace(*mag_range, num_magnitude_bins)``. The ranges below are the defaults;
the suites set their own with ``.augmentation(...)``, e.g.
``shear_x.augmentation(mag_range=(0, 0.5))``.

Numerics follow PIL's ``ImageEnhance`` / ``ImageOps`` as DALI does: ``contrast`` blends with
the image's luma mean (0.299 R + 0.587 G + 0.114 B), ``sharpness`` blends with a 3x3 smoothing
filter (also at the 1-pixel border, which PIL leaves as is), ``equalize`` is OpenCV's histogram
equalization. The geometric ones (shears, translations, rotation) fill with ``fill_value``
(128; None: repeat the border) and interpolate with ``interp_type`` (linear by default).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import fn, types
from ..errors import ArgumentError
from .core import augmentation

__all__ = [
    "auto_contrast",
    "brightness",
    "color",
    "contrast",
    "equalize",
    "identity",
    "invert",
    "posterize",
    "rotate",
    "sharpness",
    "shear_x",
    "shear_y",
    "solarize",
    "solarize_add",
    "translate_x",
    "translate_x_no_shape",
    "translate_y",
    "translate_y_no_shape",
]


def warp_x_param(magnitude):
    return [magnitude, 0]


def warp_y_param(magnitude):
    return [0, magnitude]


def _warp(data, mt, fill_value, interp_type):
    return fn.warp_affine(
        data, matrix=mt, fill_value=fill_value, interp_type=interp_type, inverse_map=False
    )


def _warp_by(matrix: Callable) -> Callable:
    """Mark an augmentation's op as ``_warp(data, matrix(param, **extra), fill_value,
    interp_type)``: ``select`` then warps the samples of several such augmentations with one
    ``warp_affine`` (each sample with its own augmentation's matrix) instead of one each
    (``core._select``)."""

    def mark(op: Callable) -> Callable:
        op.warp_matrix = matrix
        op.warp = _warp
        return op

    return mark


_VALUES = np.arange(256, dtype=np.uint8)


def _lookup_by(table: Callable) -> Callable:
    """Mark an augmentation's op as mapping each uint8 value on its own: ``table(param)`` is
    the 256 values it maps ``0..255`` to (``param`` is one row of the precomputed parameters,
    None for an op without). ``select`` then runs the samples of several such augmentations
    through one lookup (``_lookup_rows``) instead of their arithmetic (``core._select``); the
    tables equal the arithmetic's results (tests/core/test_auto_aug.py)."""

    def mark(op: Callable) -> Callable:
        op.point_table = table
        return op

    return mark


def _map_by_stats(kind: str) -> Callable:
    """Mark an augmentation's op as mapping each uint8 value of a plane (frame, channel) on its
    own, by a table that depends on its float parameter or the plane's statistics (``kind``:
    "brightness", "contrast", "auto_contrast", "equalize"). ``select`` then runs its samples
    with those of the other value-wise augmentations through one ``_lookup_stats``, whose
    tables follow the op's own arithmetic (``core._select``)."""

    def mark(op: Callable) -> Callable:
        op.point_kind = kind
        return op

    return mark


def _shear_matrix(shear):
    return fn.transforms.shear(shear=shear)


def _translate_x_matrix(rel_offset, shape):
    return fn.transforms.translation(offset=rel_offset * shape[1])


def _translate_y_matrix(rel_offset, shape):
    return fn.transforms.translation(offset=rel_offset * shape[0])


def _translation_matrix(offset):
    return fn.transforms.translation(offset=offset)


@augmentation(mag_range=(0, 0.3), randomly_negate=True, mag_to_param=warp_x_param)
@_warp_by(_shear_matrix)
def shear_x(data, shear, fill_value=128, interp_type=None):
    """Shear along x: the pixel at (x, y) moves to (x + shear * y, y)."""
    return _warp(data, _shear_matrix(shear), fill_value, interp_type)


@augmentation(mag_range=(0, 0.3), randomly_negate=True, mag_to_param=warp_y_param)
@_warp_by(_shear_matrix)
def shear_y(data, shear, fill_value=128, interp_type=None):
    """Shear along y: the pixel at (x, y) moves to (x, y + shear * x)."""
    return _warp(data, _shear_matrix(shear), fill_value, interp_type)


@augmentation(mag_range=(0.0, 1.0), randomly_negate=True, mag_to_param=warp_x_param)
@_warp_by(_translate_x_matrix)
def translate_x(data, rel_offset, shape, fill_value=128, interp_type=None):
    """Shift along x by a fraction of the width (``shape`` is (H, W, ...) of the images)."""
    return _warp(data, _translate_x_matrix(rel_offset, shape), fill_value, interp_type)


@augmentation(
    mag_range=(0, 250), randomly_negate=True, mag_to_param=warp_x_param, name="translate_x"
)
@_warp_by(_translation_matrix)
def translate_x_no_shape(data, offset, fill_value=128, interp_type=None):
    """Shift along x by ``offset`` pixels."""
    return _warp(data, _translation_matrix(offset), fill_value, interp_type)


@augmentation(mag_range=(0.0, 1.0), randomly_negate=True, mag_to_param=warp_y_param)
@_warp_by(_translate_y_matrix)
def translate_y(data, rel_offset, shape, fill_value=128, interp_type=None):
    """Shift along y by a fraction of the height."""
    return _warp(data, _translate_y_matrix(rel_offset, shape), fill_value, interp_type)


@augmentation(
    mag_range=(0, 250), randomly_negate=True, mag_to_param=warp_y_param, name="translate_y"
)
@_warp_by(_translation_matrix)
def translate_y_no_shape(data, offset, fill_value=128, interp_type=None):
    """Shift along y by ``offset`` pixels."""
    return _warp(data, _translation_matrix(offset), fill_value, interp_type)


def _rotate_by(op: Callable) -> Callable:
    """Mark the rotation: ``select`` warps its samples with those of the warps by a matrix
    (``_warp_by``) in one operator when it keeps the size (``core._select``)."""
    op.warp_rotate = True
    return op


@augmentation(mag_range=(0, 30), randomly_negate=True)
@_rotate_by
def rotate(data, angle, fill_value=128, interp_type=None, rotate_keep_size=True):
    """Rotate by ``angle`` degrees (counter-clockwise), keeping the size by default."""
    return fn.rotate(
        data,
        angle=angle,
        fill_value=fill_value,
        interp_type=interp_type,
        keep_size=rotate_keep_size,
    )


def shift_enhance_range(magnitude):
    """The enhance operations (brightness, contrast, color, sharpness) are neutral at 1 and
    stronger away from it: their magnitudes are given in [0, 1], randomly negated, then
    shifted by 1."""
    return 1 + magnitude


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
@_map_by_stats("brightness")
def brightness(data, parameter):
    """Scale the values by ``parameter`` (PIL's ``ImageEnhance.Brightness``)."""
    return fn.brightness(data, brightness=parameter)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
@_map_by_stats("contrast")
def contrast(data, parameter):
    """Blend with the mean luma (PIL's ``ImageEnhance.Contrast``: the channel-weighted mean
    is the contrast centre)."""
    mean = fn.reductions.mean(data, axis_names="HW", keep_dims=True)
    rgb_weights = types.Constant(np.array([0.299, 0.587, 0.114], dtype=np.float32))
    center = fn.reductions.sum(mean * rgb_weights, axis_names="C", keep_dims=True)
    # The centre is computed from the data, on the data's device: blended with arithmetic,
    # since a GPU node cannot be an argument input of fn.contrast.
    return fn.cast_like(center + (data - center) * parameter, data)


@augmentation(mag_range=(0, 0.9), randomly_negate=True, mag_to_param=shift_enhance_range)
def color(data, parameter):
    """Scale the saturation (PIL's ``ImageEnhance.Color``)."""
    return fn.saturation(data, saturation=parameter)


def sharpness_kernel(magnitude):
    """The 3x3 kernel blending the image with its PIL-smoothed version; magnitude in
    [-1, 1] (0: identity)."""
    blur = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float32) / 13
    ident = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float32)
    return -magnitude * blur + (1 + magnitude) * ident


def sharpness_kernel_shifted(magnitude):
    """:func:`sharpness_kernel` for magnitudes in [0, 2] (1: identity)."""
    return sharpness_kernel(magnitude - 1)


@augmentation(
    mag_range=(0, 0.9), randomly_negate=True, mag_to_param=sharpness_kernel, param_device="auto"
)
def sharpness(data, kernel):
    """PIL's ``ImageEnhance.Sharpness``, except at the 1-pixel border (PIL copies the input
    there; here the filter sees the image mirrored)."""
    return fn.experimental.filter(data, kernel)


def poster_mask_uint8(magnitude):
    """The mask keeping the ``round(magnitude)`` highest bits (1 to 8: 0 is taken as 1, as in
    the RandAugment paper's implementations, to avoid a blank image)."""
    magnitude = np.round(magnitude).astype(np.uint32)
    if magnitude <= 0:
        magnitude = 1
    elif magnitude > 8:
        magnitude = 8
    nbits = np.round(8 - magnitude).astype(np.uint32)
    removal_mask = np.uint8(2) ** nbits - 1
    return np.array(np.uint8(255) ^ removal_mask, dtype=np.uint8)


@augmentation(mag_range=(0, 4), mag_to_param=poster_mask_uint8, param_device="auto")
@_lookup_by(lambda mask: _VALUES & np.uint8(mask))
def posterize(data, mask):
    """Keep the highest bits of each value."""
    return data & mask


def _solarize_table(threshold):
    # uint8 < float threshold, as the arithmetic promotes it (to the threshold's float type)
    return np.where(_VALUES < threshold, _VALUES, 255 - _VALUES).astype(np.uint8)


@augmentation(mag_range=(256, 0), param_device="auto")
@_lookup_by(_solarize_table)
def solarize(data, threshold):
    """Invert the values at or above ``threshold``."""
    sample_inv = types.Constant(255, dtype=types.UINT8) - data
    mask_unchanged = data < threshold
    mask_inverted = mask_unchanged ^ True
    return mask_unchanged * data + mask_inverted * sample_inv


def solarize_add_shift(shift):
    if shift >= 128:
        raise ArgumentError("The solarize_add augmentation accepts shifts from 0 to 128")
    return np.uint8(shift)


def _solarize_add_table(shift):
    return np.where(_VALUES < 128, _VALUES + np.uint8(shift), _VALUES).astype(np.uint8)


@augmentation(mag_range=(0, 110), param_device="auto", mag_to_param=solarize_add_shift)
@_lookup_by(_solarize_add_table)
def solarize_add(data, shift):
    """Add ``shift`` to the values below 128."""
    mask_shifted = data < types.Constant(128, dtype=types.UINT8)
    mask_id = mask_shifted ^ True
    sample_shifted = data + shift
    return mask_shifted * sample_shifted + mask_id * data


@augmentation
@_lookup_by(lambda _: 255 - _VALUES)
def invert(data, _):
    """255 - value."""
    return types.Constant(255, dtype=types.UINT8) - data


@augmentation
@_map_by_stats("equalize")
def equalize(data, _):
    """Per-channel histogram equalization (OpenCV's formula; PIL's differs slightly in how it
    turns the cumulative histogram into the lookup table)."""
    return fn.experimental.equalize(data)


@augmentation
@_map_by_stats("auto_contrast")
def auto_contrast(data, _):
    """Stretch each channel to [0, 255] (PIL's ``ImageOps.autocontrast`` without cutoff); a
    channel of one value is left as is."""
    lo = fn.reductions.min(data, axis_names="HW", keep_dims=True)
    hi = fn.reductions.max(data, axis_names="HW", keep_dims=True)
    diff = hi - lo
    mask_scale = diff > 0
    mask_id = mask_scale ^ True
    # 255 / diff where the channel has a range, 1 where it has none
    div_by = diff * mask_scale + types.Constant(255, dtype=types.UINT8) * mask_id
    scale = 255 / div_by
    scaled = (data - lo * mask_scale) * scale
    return fn.cast_like(scaled, data)


@augmentation
def identity(data, _):
    """The data as it is."""
    return data
