"""The size classes of the pinned staging buffers of ``.gpu()`` copies (``_copy.pinned_size``):
CuPy's pinned pool reuses a freed block only for a request of the same size."""

from __future__ import annotations

import numpy as np

from dlpipe.operators._copy import pinned_size


def test_size_classes_are_few_and_close_above():
    sizes = np.random.default_rng(0).integers(1, 64 << 20, 5000)
    classes = {pinned_size(int(n)) for n in sizes}
    for n in sizes:
        c = pinned_size(int(n))
        assert c >= n and c % 512 == 0
        assert c <= max(512, n * 1.125)
    # 8 classes per power of two: ragged batches of 12-16 MiB share 5 sizes (1 MiB steps)
    assert len({pinned_size(int(n)) for n in range(12 << 20, 16 << 20, 4099)}) == 5
    assert len(classes) < 8 * 27
    assert pinned_size(512) == 512 and pinned_size(1 << 24) == 1 << 24
