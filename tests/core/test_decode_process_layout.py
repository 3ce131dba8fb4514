"""The decode server's packing of a batch's images into one device buffer (pure host logic,
so it runs in CI; the server itself is tested on the GPU in tests/gpu/test_decode_process.py)."""

from __future__ import annotations

from dlpipe.decoders import _decode_process
from dlpipe.decoders._decode_server import ALIGN, layout


class _Image:
    def __init__(self, *shape):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "|u1", "data": (0, False)}


def test_images_are_packed_in_order_aligned_and_failures_marked():
    images = [_Image(3, 5, 3), None, _Image(100, 200, 3), _Image(7, 9, 1), _Image(4, 4)]
    offsets, shapes, total = layout(images)
    sizes = [45, 0, 60000, 63, 16]
    want, pos = [], 0
    for img, size in zip(images, sizes, strict=True):
        want.append(-1 if img is None else pos)
        if img is not None:
            pos += -(-size // ALIGN) * ALIGN
    assert offsets.tolist() == want == [0, -1, 256, 60416, 60672]
    assert shapes.tolist() == [[3, 5, 3], [0, 0, 0], [100, 200, 3], [7, 9, 1], [4, 4, 1]]
    assert total == pos == 60928
    assert all(o % ALIGN == 0 for o in offsets if o >= 0)


def test_decode_process_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("DLPIPE_DECODE_PROCESS", "0")
    assert not _decode_process.available()
    monkeypatch.delenv("DLPIPE_DECODE_PROCESS")
    assert _decode_process.available() == hasattr(__import__("os"), "memfd_create")
