"""The GPU resize launcher's per-axis filter geometry, computed for a whole batch at once
(``kernels.resize._axes``), equals the CPU resampler's per-axis functions bit for bit. No GPU
needed: it is host arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from dlpipe._geometry.resize_params import FilterType, select_axis_filter, window_geometry
from dlpipe.kernels.resize import _axes


def _axis(extent: float, out_size: int, min_filter: int, mag_filter: int, antialias: bool):
    """(kind, anchor, table scale, taps) of one axis, from the CPU resampler's functions."""
    flt = select_axis_filter(
        extent, out_size, FilterType(min_filter), FilterType(mag_filter), antialias
    )
    if flt.type == FilterType.NEAREST:
        return 0, 0.0, 1.0, 1
    anchor, tab_scale, taps = window_geometry(flt)
    return int(flt.type), float(anchor), float(tab_scale), int(taps)


@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("mag", range(6))
@pytest.mark.parametrize("min_filter", range(6))
def test_batch_geometry_equals_the_per_axis_one(min_filter, mag, antialias):
    rng = np.random.default_rng(min_filter * 12 + mag * 2 + antialias)
    ext = np.concatenate(
        [
            (rng.random(60) * 900 + 0.5).astype(np.float32),
            np.array([224, 223.99, 448, 1, 640, 0.25], np.float32),
        ]
    )
    osz = np.concatenate([rng.integers(1, 700, 60), [224, 224, 224, 3, 640, 1]])
    got = _axes(ext, osz, min_filter, mag, antialias)
    for i, (e, o) in enumerate(zip(ext.tolist(), osz.tolist(), strict=True)):
        want = _axis(e, o, min_filter, mag, antialias)
        assert [got[0][i], got[1][i], got[2][i], got[3][i]] == list(want), (e, o)
