"""Synthetic videos for tests and benchmarks, encoded with PyAV.

Every frame carries its index: the left half is a flat grey of level ``index_level(i)``, the right
half a flat colour per video, so frame order survives lossy compression (flat blocks compress
almost exactly) and can be read back with :func:`frame_index_of`.
"""

from __future__ import annotations

import numpy as np

from ._video_index import import_av

LEVEL_STEP = 4  # grey levels between consecutive frame indices (indices 0..63 stay in range)


def index_level(i: int) -> int:
    return (i * LEVEL_STEP) % 256


def frame_index_of(frame: np.ndarray) -> int:
    """The index a synthetic frame (H, W, 3 RGB) encodes, modulo 64."""
    w = frame.shape[1]
    level = float(frame[:, : w // 2].astype(np.float32).mean())
    return int(round(level / LEVEL_STEP)) % (256 // LEVEL_STEP)


def write_video(
    path: str,
    num_frames: int,
    width: int = 64,
    height: int = 48,
    fps: int = 30,
    gop: int = 10,
    codec: str = "libx264",
    color: tuple[int, int, int] = (200, 50, 100),
    crf: int | None = 10,
    bframes: int = 2,
    pattern: str = "index",
    seed: int = 0,
) -> str:
    """Encode a constant-frame-rate video of ``num_frames`` frames (yuv420p, in an MP4/MKV
    container chosen by the extension) and return ``path``.

    Args:
        pattern: ``"index"``: flat blocks encoding the frame index (see the module docstring);
            ``"natural"``: moving smooth noise (benchmark-like content; slower to encode).
        crf: x264 constant rate factor (0 = lossless luma); None keeps the encoder's default.
        bframes: B-frames between references (so decode order differs from display order).
    """
    av = import_av()
    rng = np.random.default_rng(seed)
    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.gop_size = gop
        options = {"bf": str(bframes), "keyint_min": str(gop), "sc_threshold": "0"}
        if crf is not None and codec in ("libx264", "libx265"):
            options["crf"] = str(crf)
        if codec == "libx265":
            options["x265-params"] = "log-level=none"
        stream.options = options
        if pattern == "natural":
            base = rng.integers(0, 256, (height // 8 + 2, width // 8 + 2, 3)).astype(np.float32)
            import cv2

            big = cv2.resize(base, (width + 64, height + 64), interpolation=cv2.INTER_CUBIC)
            big = np.clip(big, 0, 255).astype(np.uint8)
        for i in range(num_frames):
            if pattern == "natural":
                dx, dy = (2 * i) % 64, i % 64
                img = np.ascontiguousarray(big[dy : dy + height, dx : dx + width])
            else:
                img = np.empty((height, width, 3), np.uint8)
                img[:, : width // 2] = index_level(i)
                img[:, width // 2 :] = color
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
