"""``fn.crop_mirror_normalize``: crop, horizontal flip, normalization, layout transpose, channel
padding and type conversion in one pass.

DALI (``crop_mirror_normalize.h``, CPU kernel ``slice_flip_normalize_permute_pad_cpu.h``) folds
``scale`` and ``shift`` into the per-channel mean and reciprocal deviation once, in float32:

    mean' = mean - shift * std / scale,   inv' = scale / std,   out = (in - mean') * inv'

which equals ``scale * (in - mean) / std + shift``. Integer outputs round half away from zero
and saturate. Padded areas (``out_of_bounds_policy="pad"``, ``pad_output``) hold
``fill_values`` as they are (in output units, not normalized).

The CPU implementation writes the output once: the crop is a view of the input, the mirror a
negative-stride view of the output, the transpose a strided view of the output buffer, and the
normalization two numpy ufunc passes (subtract, multiply) straight into it.
"""

from __future__ import annotations

import cv2
import numpy as np

from ..errors import ArgumentError
from ..graph import Operator, register
from ..kernels.slice import slice_normalize_batch
from ..types import DALIDataType
from .cast import convert_sat, parse_dtype
from .crop import CropArgs, default_layout, fill_array, gpu_windows, window_slices

__all__ = ["CropMirrorNormalize", "normalization_params"]

_OUT_TYPES = (np.float32, np.float16, np.uint8, np.int8)
_LEGACY_LAYOUTS = {"NCHW": "CHW", "NHWC": "HWC", "NFHWC": "FHWC", "NFCHW": "FCHW"}


def _next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def normalization_params(
    mean, std, scale: float, shift: float, who: str = "crop_mirror_normalize"
) -> tuple[np.ndarray, np.ndarray]:
    """DALI's folded ``(mean', inv')`` (float32 arrays of equal length; see the module doc).

    Raises:
        ArgumentError: on empty or mismatched ``mean``/``std``, a zero ``std`` or ``scale``.
    """
    m = np.atleast_1d(np.asarray(mean, dtype=np.float32)).reshape(-1)
    s = np.atleast_1d(np.asarray(std, dtype=np.float32)).reshape(-1)
    if m.size == 0 or s.size == 0:
        raise ArgumentError(f"{who}: mean={mean!r} and std={std!r} must not be empty")
    if m.size != s.size and m.size != 1 and s.size != 1:
        raise ArgumentError(
            f"{who}: mean={list(m)} and std={list(s)} must have the same length, or one of "
            "them must be a single value"
        )
    if (s == 0).any():
        raise ArgumentError(f"{who}: std={list(s)} must not contain 0")
    if scale == 0:
        raise ArgumentError(f"{who}: scale={scale} must not be 0")
    n = max(m.size, s.size)
    m = np.broadcast_to(m, (n,)).copy()
    s = np.broadcast_to(s, (n,)).copy()
    scale32, shift32 = np.float32(scale), np.float32(shift)
    mean_f = (m - shift32 * s / scale32).astype(np.float32)
    inv_f = (scale32 / s).astype(np.float32)
    return mean_f, inv_f


@register(legacy=("CropMirrorNormalize",))
class CropMirrorNormalize(CropArgs, Operator):
    """Crops, mirrors, normalizes and transposes images, and converts their type.

    ``out = scale * (in - mean) / std + shift``, per channel, after the crop and the mirror.

    Args:
        crop, crop_h, crop_w, crop_d, crop_pos_x, crop_pos_y, crop_pos_z, out_of_bounds_policy,
            fill_values: as for ``fn.crop`` (no crop: the whole image).
        mean: per-channel (or one) mean in input units, e.g. ``[0.485 * 255, ...]`` (default
            [0.0]); per-sample argument input allowed.
        std: per-channel (or one) standard deviation in input units (default [1.0]); argument
            input allowed.
        scale: multiplies the result (default 1.0). shift: added last (default 0.0).
        mirror: nonzero flips horizontally (default 0); per-sample argument input, e.g.
            ``mirror=fn.random.coin_flip()``.
        output_layout: e.g. ``"CHW"`` (default) or ``"HWC"``; a permutation of the input layout.
        dtype: FLOAT (default), FLOAT16, INT8 or UINT8 (integers round and saturate).
        pad_output: pad the channels to the next power of 2 (3 -> 4) with ``fill_values``
            (default False).

    Example:
        >>> with pipe:
        ...     out = fn.crop_mirror_normalize(
        ...         images, crop=(224, 224), mirror=fn.random.coin_flip(),
        ...         mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        ...         std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
    """

    schema = "crop_mirror_normalize"
    devices = ("cpu", "gpu")
    arg_inputs = CropArgs.CROP_ARG_INPUTS | {"mirror", "mean", "std"}

    def setup(
        self,
        *,
        crop=None,
        crop_h=None,
        crop_w=None,
        crop_d=None,
        crop_pos_x=0.5,
        crop_pos_y=0.5,
        crop_pos_z=0.5,
        out_of_bounds_policy="error",
        fill_values=(0,),
        mean=(0.0,),
        std=(1.0,),
        scale=1.0,
        shift=0.0,
        mirror=0,
        output_layout="CHW",
        dtype=DALIDataType.FLOAT,
        output_dtype=None,
        pad_output=False,
        image_type=None,
    ) -> None:
        self.setup_crop(
            self.schema,
            crop,
            crop_h,
            crop_w,
            crop_d,
            crop_pos_x,
            crop_pos_y,
            crop_pos_z,
            out_of_bounds_policy,
            fill_values,
        )
        if output_dtype is not None:  # DALI's deprecated spelling
            dtype = output_dtype
        self.dtype = parse_dtype(dtype, self.schema, allowed=_OUT_TYPES)
        self.scale = float(scale)
        self.shift = float(shift)
        self._mean_arg, self._std_arg = mean, std
        self.mean, self.inv_std = normalization_params(
            mean, std, self.scale, self.shift, self.schema
        )
        if np.ndim(mirror) or not isinstance(mirror, int | bool | np.integer):
            raise ArgumentError(f"{self.schema}: mirror={mirror!r} must be 0 or 1")
        self.mirror = bool(mirror)
        if not isinstance(output_layout, str):
            raise ArgumentError(f"{self.schema}: output_layout={output_layout!r} must be a str")
        # the literal legacy spellings too ("NCHW" for "CHW", ...); types.NCHW is "CHW" already
        self.output_layout = _LEGACY_LAYOUTS.get(output_layout, output_layout)
        self.pad_output = bool(pad_output)

    def output_layouts(self, input_layouts):
        self._layout = input_layouts[0] if input_layouts else ""
        if self._layout and self.output_layout:
            self._check_permutation(self._layout)
        return [self.output_layout or self._layout]

    def _check_permutation(self, layout: str) -> None:
        if sorted(self.output_layout) != sorted(layout):
            raise ArgumentError(
                f"{self.schema}: output_layout={self.output_layout!r} is not a permutation of "
                f"the input layout {layout!r}"
            )
        if "C" not in layout:
            raise ArgumentError(
                f"{self.schema}: the input layout {layout!r} has no channel axis (C); "
                "monochrome images need an explicit C of 1"
            )

    def _sample_norm(self, args: dict) -> tuple[np.ndarray, np.ndarray]:
        if "mean" not in args and "std" not in args:
            return self.mean, self.inv_std
        return normalization_params(
            args.get("mean", self._mean_arg),
            args.get("std", self._std_arg),
            self.scale,
            self.shift,
            self.schema,
        )

    def run_sample(self, inputs, args, param):
        x = inputs[0]
        layout = default_layout(self._layout, x.ndim, self.schema)
        out_layout = self.output_layout or layout
        if not self._layout:  # a known layout was checked at build time
            self._check_permutation(layout)
        c_axis = layout.find("C")
        nch = x.shape[c_axis]
        if self.has_crop(args):
            anchor, shape = self.sample_window(x.shape, layout, args)
        else:
            anchor, shape = [0] * x.ndim, list(x.shape)
        nch_out = _next_pow2(nch) if self.pad_output else nch
        shape[c_axis] = nch_out

        mean, inv = self._sample_norm(args)
        self._check_norm_size(mean, nch)
        mirror = self.mirror if "mirror" not in args else bool(np.asarray(args["mirror"]).any())

        perm = [layout.index(a) for a in out_layout]
        out = np.empty([shape[p] for p in perm], self.dtype)
        o = out.transpose(np.argsort(perm))  # the output seen in input axis order
        if mirror:
            flip = [slice(None)] * x.ndim
            flip[layout.index("W")] = slice(None, None, -1)
            o = o[tuple(flip)]
        src, dst, padded = window_slices(x.shape, anchor, shape)
        if (
            self.dtype == np.float16
            and x.dtype == np.uint8
            and layout == "HWC"
            and out_layout == "CHW"
            and not padded
            and nch_out == nch <= 4
        ):
            return self._float16_chw(x[src], mirror, mean, inv, out)
        if padded:
            self._fill(o, c_axis, nch, nch_out)
        # Iterate in output order: numpy's loops are fastest with a contiguous destination.
        region, target = x[src].transpose(perm), o[dst].transpose(perm)
        bshape = [1] * x.ndim
        bshape[out_layout.index("C")] = mean.size
        if np.all(mean == 0) and np.all(inv == 1):
            convert_sat(region, self.dtype, out=target)
        elif self.dtype == np.float32:
            np.subtract(
                region, mean.reshape(bshape), out=target, dtype=np.float32, casting="unsafe"
            )
            np.multiply(target, inv.reshape(bshape), out=target)
        else:
            tmp = np.subtract(region, mean.reshape(bshape), dtype=np.float32, casting="unsafe")
            tmp *= inv.reshape(bshape)
            convert_sat(tmp, self.dtype, out=target)
        return out

    @staticmethod
    def _float16_chw(region, mirror, mean, inv, out):
        """uint8 HWC -> float16 CHW (the ResNet training layout) through OpenCV: one pass per
        channel with a SIMD float16 store, about 20x faster than numpy's float16 cast. The
        value is ``in * inv + (-mean * inv)``, rounded once to float16 (numpy's path differs
        by at most one float16 ulp)."""
        if mirror:
            region = cv2.flip(region, 1)
        planes = cv2.split(np.ascontiguousarray(region) if region.ndim == 3 else region[..., None])
        means = np.broadcast_to(mean.ravel(), len(planes))
        invs = np.broadcast_to(inv.ravel(), len(planes))
        for c, plane in enumerate(planes):
            a = float(invs[c])
            cv2.addWeighted(
                plane, a, plane, 0.0, -float(means[c]) * a, dst=out[c], dtype=cv2.CV_16F
            )
        return out

    def _fill_values(self, nch: int, nch_out: int) -> np.ndarray:
        fv = list(self.fill_values)
        if len(fv) == nch and nch != nch_out:  # per input channel: the pad channels get 0
            fv += [0.0] * (nch_out - nch)
        return fill_array(fv, nch_out, self.dtype, self.schema)

    def _fill(self, o: np.ndarray, c_axis: int, nch: int, nch_out: int) -> None:
        fill = self._fill_values(nch, nch_out)
        if fill.size > 1:
            bshape = [1] * o.ndim
            bshape[c_axis] = fill.size
            o[...] = fill.reshape(bshape)
        else:
            o[...] = fill[0]

    def _check_norm_size(self, mean: np.ndarray, nch: int, gpu: bool = False) -> None:
        if mean.size not in (1, nch) or (gpu and mean.size > 4):
            msg = (
                f"{self.schema}: mean/std have {mean.size} values but the input has {nch} channels"
            )
            raise ArgumentError(msg + (" (the GPU kernel takes at most 4)" if gpu else ""))

    def run_batch(self, inputs, args, params, stream):
        """GPU: the fused slice/normalize kernel, one launch for the batch (HWC input, CHW or
        HWC output). Integer outputs round half to even there (CUDA's ``rint``)."""
        s, layout, wins = gpu_windows(self, inputs[0], args, ("HWC",))
        out_layout = self.output_layout or layout
        if out_layout not in ("CHW", "HWC"):
            raise ArgumentError(
                f"{self.schema}: device='gpu' writes CHW or HWC, not output_layout={out_layout!r}"
            )
        n = len(s)
        nch = int(s.shapes[0, 2]) if n else 3
        nch_out = _next_pow2(nch) if self.pad_output else nch
        mirror = np.zeros(n, np.int64)
        if "mean" not in args and "std" not in args:  # one mean/std for the whole batch
            self._check_norm_size(self.mean, nch, gpu=True)
            # one row each, which the launcher broadcasts to every sample
            means = np.broadcast_to(np.asarray(self.mean).reshape(-1), (1, nch))
            invs = np.broadcast_to(np.asarray(self.inv_std).reshape(-1), (1, nch))
            if "mirror" in args:
                mirror[:] = _flags(args["mirror"], n)
            else:
                mirror = int(self.mirror)  # (the launcher broadcasts it)
        else:
            means, invs = [], []
            for i in range(n):
                sample_args = {k: v[i] for k, v in args.items()}
                mean, inv = self._sample_norm(sample_args)
                self._check_norm_size(mean, nch, gpu=True)
                means.append(np.broadcast_to(mean, (nch,)))
                invs.append(np.broadcast_to(inv, (nch,)))
                if "mirror" in sample_args:
                    mirror[i] = bool(np.asarray(sample_args["mirror"]).any())
                else:
                    mirror[i] = self.mirror
            means = np.array(means).reshape(n, nch)
            invs = np.array(invs).reshape(n, nch)
        fill = self._fill_values(nch, nch_out)
        (y0, x0), (oh, ow) = wins[:, 0, :2].T, wins[:, 1, :2].T
        return slice_normalize_batch(
            s,
            oh,
            ow,
            y0,
            x0,
            flip_x=mirror,
            mean=means,
            mul=invs,
            shift=0.0,
            fill=fill,
            out_dtype=self.dtype,
            out_channels=nch_out,
            planar=out_layout == "CHW",
            stream=stream,
        )


def _flags(values: list, n: int) -> np.ndarray:
    """Per-sample truth of a flag argument input (any non-zero element), in one numpy call
    when every sample has the same shape."""
    try:
        return np.asarray(values).reshape(n, -1).any(axis=1)
    except ValueError:  # samples of different shapes
        return np.array([bool(np.asarray(m).any()) for m in values])
