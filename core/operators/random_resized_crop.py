"""``fn.random_resized_crop``: a random crop window (DALI's ``RandomCropAttr``) resized to
``size``, in one resampling pass.

The window is DALI's (``_geometry.crop_window.RandomCropWindow``), its uniforms drawn per batch
in ``batch_params`` so the result does not depend on the thread count. As in DALI, the window is
the resampling ROI on the whole image: no crop is copied, and filter taps near the window's
edge read the real pixels around it (clamping only at the image border).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._geometry.crop_window import RandomCropWindow
from .._geometry.resize_params import ResizeParams
from ..errors import ArgumentError
from ..graph import Operator, Rows, register
from .resize import ResamplingAttrs, resample


def _size_arg(size) -> tuple[int, int]:
    if size is None:
        raise ArgumentError("random_resized_crop: size is required ([height, width])")
    vals = np.atleast_1d(np.asarray(size, dtype=object)).tolist()
    if len(vals) == 1:
        vals = vals * 2
    ok = len(vals) == 2 and all(
        not isinstance(v, bool)
        and isinstance(v, int | float | np.number)
        and v > 0
        and float(v).is_integer()
        for v in vals
    )
    if not ok:
        raise ArgumentError(
            f"random_resized_crop: size={size!r} must be one or two positive integers [H, W]"
        )
    return int(vals[0]), int(vals[1])


@register(legacy=("RandomResizedCrop",))
class RandomResizedCrop(Operator):
    """Crops a random window (random area share and aspect ratio) and resizes it to ``size``.

    The ResNet/Inception training augmentation. Input: HWC images.

    Args:
        size: output [height, width] (required; one number means a square).
        random_area: [min, max] share of the image area (default [0.08, 1.0]).
        random_aspect_ratio: [min, max] width/height (default [3/4, 4/3]).
        num_attempts: tries before falling back to the whole (clamped) image (default 10).
        interp_type: ``types.INTERP_LINEAR`` (default), or NN, CUBIC, LANCZOS3, TRIANGULAR,
            GAUSSIAN; ``min_filter``/``mag_filter`` as in ``fn.resize``.
        antialias: widen the filter when shrinking (default True).
        dtype: output type: None (input type, default) or ``types.FLOAT``.
        seed: random seed (default: drawn from the pipeline's).

    Example:
        >>> images = fn.random_resized_crop(fn.decoders.image(jpegs), size=[224, 224])
    """

    schema = "random_resized_crop"
    devices = ("cpu", "gpu")
    is_random = True

    def setup(
        self,
        *,
        size: Sequence[int] | int | None = None,
        random_area: Sequence[float] = (0.08, 1.0),
        random_aspect_ratio: Sequence[float] = (3 / 4, 4 / 3),
        num_attempts: int = 10,
        interp_type=None,
        min_filter=None,
        mag_filter=None,
        antialias=True,
        dtype=None,
        temp_buffer_hint=0,
        minibatch_size=32,
    ) -> None:
        self.size = _size_arg(size)
        self.window = RandomCropWindow(
            random_area, random_aspect_ratio, num_attempts, who=self.schema
        )
        self.attrs = ResamplingAttrs(
            self.schema, interp_type, min_filter, mag_filter, antialias, dtype
        )

    def output_layouts(self, input_layouts):
        lay = input_layouts[0] if input_layouts else ""
        if lay not in ("", "HWC"):
            raise ArgumentError(
                f"random_resized_crop: input layout {lay!r} is not supported; expected HWC"
            )
        return ["HWC"]

    def batch_params(self, n):
        u = self.window.draw(self.rng, n)
        return Rows(list(u), u)

    def crop_window(self, height: int, width: int, u: np.ndarray) -> tuple[int, int, int, int]:
        """(y, x, h, w) of the window for an image of ``height`` x ``width``."""
        return self.window.window(height, width, u)

    def run_sample(self, inputs, args, param):
        img = inputs[0]
        if img.ndim != 3:
            raise ArgumentError(f"random_resized_crop: expects HWC samples, got shape {img.shape}")
        y, x, h, w = self.window.window(img.shape[0], img.shape[1], param)
        p = ResizeParams(self.size, (float(y), float(x)), (float(y + h), float(x + w)))
        a = self.attrs
        return resample(img, p, a.min_filter, a.mag_filter, a.antialias, a.out_dtype(img.dtype))

    def run_batch(self, inputs, args, params, stream):
        """GPU: the window is the resize kernel's source ROI (crop and resize fused)."""
        from ..kernels._batch import as_samples
        from ..kernels.resize import crop_resize_batch

        s = as_samples(inputs[0])
        u = getattr(params, "array", None)
        if u is None:
            u = np.stack(params) if len(s) else np.zeros((0, 2 * self.window.attempts + 2))
        wins = self.window.windows(s.shapes[:, 0], s.shapes[:, 1], u)
        return crop_resize_batch(s, wins, self.size, self.attrs, stream)
