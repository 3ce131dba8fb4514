"""``show_images``: a grid picture of a batch, for eyeballing what a pipeline produces.

    >>> import dlpipe
    >>> images, labels = pipe.run()
    >>> dlpipe.show_images(images, "batch.png", columns=8)            # write a PNG
    >>> fig = dlpipe.show_images(images)                              # a matplotlib Figure
    >>> grid = dlpipe.visualize.make_grid(images, mean=MEAN, std=STD)  # the RGB array

Batches may live on the CPU or the GPU (``TensorListCPU``/``TensorListGPU``, numpy or CuPy
arrays, or anything ``numpy.asarray`` takes, framework tensors included), be HWC, CHW or HW,
and hold uint8 pixels or normalized floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

from .errors import ArgumentError

__all__ = ["make_grid", "show_images"]


def _host(x) -> np.ndarray:
    """A host numpy copy/view of one image or batch, whatever holds it (no framework import)."""
    if hasattr(x, "as_cpu") and not isinstance(x, np.ndarray):  # TensorGPU / TensorCPU
        x = x.as_cpu()
    if hasattr(x, "as_array") and not isinstance(x, np.ndarray):
        x = x.as_array()
    if hasattr(x, "__cuda_array_interface__") and hasattr(x, "get"):  # CuPy
        return x.get()
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, maybe on a GPU
        x = x.detach().cpu()
    return np.asarray(x)


def _samples(batch) -> tuple[list[np.ndarray], str]:
    """The samples of ``batch`` as host arrays, and the layout it declares ("" if none)."""
    declared = batch.layout() if callable(getattr(batch, "layout", None)) else ""
    layout = declared if isinstance(declared, str) else ""  # torch/jax have other "layout"s
    if hasattr(batch, "as_cpu") and hasattr(batch, "at"):  # TensorListCPU / TensorListGPU
        batch = batch.as_cpu()
        return [np.asarray(batch.at(i)) for i in range(len(batch))], layout
    if isinstance(batch, list | tuple):
        return [_host(x) for x in batch], layout
    return list(_host(batch)), layout


def _channel_axis(img: np.ndarray, layout: str) -> int | None:
    """The channel axis of one sample (None: a 2-D grey image)."""
    if img.ndim == 2:
        return None
    if img.ndim != 3:
        raise ArgumentError(
            f"show_images: a sample has shape {img.shape}; expected an image (HW, HWC or CHW)"
        )
    if layout:
        if "C" not in layout:
            raise ArgumentError(f"show_images: layout={layout!r} has no channel axis 'C'")
        return layout.index("C")
    # No layout: a small leading axis next to a large trailing one is channels-first.
    if img.shape[0] in (1, 3, 4) and img.shape[-1] not in (1, 3, 4):
        return 0
    return 2


def _per_channel(values, channels: int, name: str) -> np.ndarray | None:
    if values is None:
        return None
    v = np.asarray(values, dtype=np.float32).ravel()
    if v.size == 1:
        v = np.repeat(v, channels)
    if v.size != channels:
        raise ArgumentError(
            f"show_images: {name}={list(np.atleast_1d(values))} has {v.size} values for "
            f"images of {channels} channels"
        )
    return v


def to_display(
    img,
    layout: str = "",
    mean: Sequence[float] | float | None = None,
    std: Sequence[float] | float | None = None,
) -> np.ndarray:
    """One sample as an (H, W, 3) uint8 RGB picture.

    ``mean``/``std`` undo a normalization ``(x - mean) / std`` per channel; when every mean is
    <= 1 the normalization is taken to be of [0, 1] pixels, so the result is scaled by 255.
    Values are then clipped to 0-255. Without ``mean``/``std``: uint8 is shown as it is, floats
    in [0, 1] are scaled by 255, floats in [0, 255] are rounded, anything else (a normalized
    image) is stretched from its own minimum and maximum to 0-255.
    """
    img = _host(img)
    layout = layout[1:] if len(layout) == img.ndim + 1 and layout[0] in "NF" else layout
    axis = _channel_axis(img, layout)
    img = img[:, :, None] if axis is None else np.moveaxis(img, axis, -1)
    channels = img.shape[2]
    m = _per_channel(mean, channels, "mean")
    s = _per_channel(std, channels, "std")
    if m is not None or s is not None:
        x = img.astype(np.float32)
        if s is not None:
            x = x * s
        if m is not None:
            x = x + m
            if float(m.max()) <= 1.0:
                x = x * 255.0
        img = np.clip(np.rint(x), 0, 255).astype(np.uint8)
    elif img.dtype != np.uint8:
        x = img.astype(np.float32)
        lo, hi = float(x.min()), float(x.max())
        if lo >= 0 and hi <= 1 and img.dtype.kind == "f":
            x = x * 255.0
        elif not (lo >= 0 and hi <= 255):
            x = (x - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(x)
        img = np.clip(np.rint(x), 0, 255).astype(np.uint8)
    if channels == 1:
        img = np.repeat(img, 3, axis=2)
    elif channels == 2:
        img = np.concatenate([img, img[:, :, :1]], axis=2)
    return np.ascontiguousarray(img[:, :, :3])


def make_grid(
    batch,
    columns: int = 4,
    *,
    cell: int = 160,
    layout: str | None = None,
    mean: Sequence[float] | float | None = None,
    std: Sequence[float] | float | None = None,
    max_images: int | None = None,
) -> np.ndarray:
    """The grid :func:`show_images` draws, as an (H, W, 3) uint8 RGB array.

    Each image is scaled to fit a ``cell`` x ``cell`` square (aspect ratio kept, centred on
    white). Arguments as for :func:`show_images`.
    """
    if isinstance(columns, bool) or not isinstance(columns, int | np.integer) or columns < 1:
        raise ArgumentError(f"show_images: columns={columns!r} must be an integer >= 1")
    if isinstance(cell, bool) or not isinstance(cell, int | np.integer) or cell < 1:
        raise ArgumentError(f"show_images: cell={cell!r} must be an integer >= 1")
    images, declared = _samples(batch)
    layout = declared if layout is None else layout
    if max_images is not None:
        images = images[:max_images]
    if not images:
        raise ArgumentError("show_images: the batch is empty")
    columns = min(columns, len(images))
    rows = math.ceil(len(images) / columns)
    grid = np.full((rows * cell, columns * cell, 3), 255, np.uint8)
    for k, img in enumerate(images):
        img = to_display(img, layout, mean, std)
        h, w = img.shape[:2]
        scale = cell / max(h, w)
        th, tw = max(1, round(h * scale)), max(1, round(w * scale))
        if (th, tw) != (h, w):
            interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
            img = cv2.resize(img, (tw, th), interpolation=interp)
        r, c = divmod(k, columns)
        y, x = r * cell + (cell - th) // 2, c * cell + (cell - tw) // 2
        grid[y : y + th, x : x + tw] = img
    return grid


def show_images(
    batch,
    path: str | None = None,
    columns: int = 4,
    *,
    cell: int = 160,
    layout: str | None = None,
    mean: Sequence[float] | float | None = None,
    std: Sequence[float] | float | None = None,
    max_images: int | None = None,
):
    """Draw a batch as a grid of RGB pictures, to a PNG file or a matplotlib figure.

    Args:
        batch: a ``TensorListCPU``/``TensorListGPU`` (a GPU batch is copied to the host), an
            array of shape (N, ...) (numpy, CuPy, a framework tensor) or a list of images.
        path: write a PNG there. None: return a matplotlib ``Figure`` when matplotlib is
            installed, else the grid array.
        columns: images per row (fewer when the batch is smaller). Default 4.
        cell: side in pixels of each square cell; images keep their aspect ratio. Default 160.
        layout: the layout of each sample, ``"HWC"``, ``"CHW"`` or ``"HW"`` (``"NHWC"`` and
            ``"NCHW"`` too). Default: the batch's own layout, else guessed from the shape.
        mean, std: per-channel values (or one for all) of a normalization to undo, as given
            to ``crop_mirror_normalize``; see :func:`to_display`.
        max_images: draw only the first this many samples.

    Returns:
        With ``path``: the grid as an (H, W, 3) uint8 RGB array. Without: a matplotlib
        ``Figure`` if matplotlib is importable, else that array.

    Raises:
        ArgumentError: an empty batch, a sample that is not an image, a bad ``columns`` or
            ``cell``, or a ``mean``/``std`` of the wrong length.

    Example:
        >>> images, labels = pipe.run()
        >>> show_images(images, "batch.png", columns=8,
        ...             mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
        ...             std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
    """
    grid = make_grid(
        batch, columns, cell=cell, layout=layout, mean=mean, std=std, max_images=max_images
    )
    if path is not None:
        if not cv2.imwrite(str(path), cv2.cvtColor(grid, cv2.COLOR_RGB2BGR)):
            raise ArgumentError(f"show_images: cannot write path={str(path)!r}")
        return grid
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return grid
    dpi = 100
    fig = Figure(figsize=(grid.shape[1] / dpi, grid.shape[0] / dpi), dpi=dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.imshow(grid)
    ax.set_axis_off()
    return fig
