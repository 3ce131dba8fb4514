"""Host-side logic of the audio GPU launchers (``kernels/audio.py``), checkable without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe.kernels import audio as kaudio
from dlpipe.operators.audio_resample import normalization, to_float_signal
from dlpipe.operators.mel_filter_bank import mel_weights


@pytest.mark.parametrize(
    "src", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.float32]
)
@pytest.mark.parametrize("dst", [np.int16, np.uint8, np.float32])
def test_gpu_input_normalization_is_the_cpu_one(src, dst):
    rng = np.random.default_rng(0)
    if np.dtype(src).kind == "f":
        x = rng.uniform(-1, 1, 50).astype(src)
    else:
        info = np.iinfo(src)
        x = rng.integers(info.min, info.max, 50, dtype=np.int64, endpoint=True).astype(src)
    scale, mul, add = normalization(src, dst)
    gpu = x.astype(np.float32) * np.float32(scale) * np.float32(mul) + np.float32(add)
    np.testing.assert_allclose(gpu, to_float_signal(x, np.dtype(dst)), rtol=0, atol=1e-6)


def test_mel_rows_are_nonzero_over_one_range():
    w = mel_weights(40, 257, 16000.0, 0.0, 8000.0, True, "slaney")
    k0, k1 = kaudio._nonzero_ranges(w)
    for m in range(40):
        nz = np.flatnonzero(w[m])
        assert (k0[m], k1[m]) == (nz[0], nz[-1] + 1)
        assert (w[m, k0[m] : k1[m]] > 0).all()  # a triangle: no zero inside its range
    k0, k1 = kaudio._nonzero_ranges(np.zeros((2, 5), np.float32))
    assert (k0 == k1).all()


def test_split_axis():
    shapes = np.array([[3, 4, 5], [2, 7, 1]])
    outer, n, inner = kaudio._split_axis(shapes, 1)
    assert outer.tolist() == [3, 2] and n.tolist() == [4, 7] and inner.tolist() == [5, 1]
    outer, n, inner = kaudio._split_axis(shapes, 0)
    assert outer.tolist() == [1, 1] and n.tolist() == [3, 2] and inner.tolist() == [20, 7]
    outer, n, inner = kaudio._split_axis(shapes, 2)
    assert outer.tolist() == [12, 14] and n.tolist() == [5, 1] and inner.tolist() == [1, 1]


def test_descriptor_layouts_match_the_cuda_structs():
    # audio.cu: every field 8 bytes, in this order
    assert kaudio.PREEMPH_DESC.itemsize == 32 and kaudio.FRAMES_DESC.itemsize == 32
    assert kaudio.AXIS_DESC.itemsize == 56 and kaudio.RESAMPLE_DESC.itemsize == 48
    assert kaudio.RESAMPLE_DESC.names[-1] == "scale" and kaudio.FLAT_DESC.itemsize == 24
    assert kaudio.NS_DESC.itemsize == 32
