"""``fn.readers.caffe``: (image, label) pairs from Caffe LMDB databases, without Caffe.

Each LMDB value is a serialized ``caffe.Datum`` (``caffe.proto``)::

    optional int32 channels = 1;  optional int32 height = 2;  optional int32 width = 3;
    optional bytes data = 4;      optional int32 label = 5;   repeated float float_data = 6;
    optional bool encoded = 7;

decoded here with ``_protobuf.py``. As in DALI's ``CaffeParser``: ``data`` is the image; it is
taken as encoded (JPEG, PNG...: output 1-D) unless ``encoded`` is present and false, in which
case it is raw pixels and the output is ``(height, width, channels)`` uint8 (DALI reshapes the
bytes as they lie; ``convert_imageset`` writes them channel-major, so such images come out in
Caffe's CHW byte order under an HWC shape, exactly as from DALI). The label is int32, shape
(1,). ``float_data`` is not read (DALI ignores it too).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ArgumentError, DecodeError
from ..graph import Operator, register
from ._lmdb import LMDBReader
from ._protobuf import WireError, as_int32, fields

WHO = "readers.caffe"


class Datum:
    """The fields of one ``caffe.Datum`` that the reader uses (None: absent)."""

    __slots__ = ("channels", "height", "width", "data", "label", "encoded")

    def __init__(self, buf: bytes):
        self.channels = self.height = self.width = self.label = None
        self.data: bytes | None = None
        self.encoded: bool | None = None
        for field, wire, value in fields(buf, 0, len(buf)):
            if field in (1, 2, 3, 5, 7) and wire != 0:
                raise WireError(f"Datum field {field} has wire type {wire}, expected a varint")
            if field == 1:
                self.channels = as_int32(value)
            elif field == 2:
                self.height = as_int32(value)
            elif field == 3:
                self.width = as_int32(value)
            elif field == 4:
                if wire != 2:
                    raise WireError(f"Datum.data has wire type {wire}")
                self.data = buf[value[0] : value[1]]
            elif field == 5:
                self.label = as_int32(value)
            elif field == 7:
                self.encoded = bool(value)
            # float_data (6) and unknown fields are skipped.


@register(legacy=("CaffeReader",))
class CaffeReader(LMDBReader, Operator):
    """Reads (image, label) pairs from Caffe LMDB databases (the ``lmdb`` package, no Caffe).

    Outputs, in order: the image (if ``image_available``): its encoded bytes (1-D uint8), or
    raw pixels (H, W, C) uint8 when the Datum says ``encoded: false``; the label (if
    ``label_available``): int32, shape (1,). All databases form one dataset in key order,
    sharded by entry index; there is no global shuffle (only the ``initial_fill`` buffer), so
    the data should be pre-shuffled (``convert_imageset --shuffle``). Each sample's
    ``source_info`` is ``"<database> at key <key>"``.

    Args:
        path: the LMDB directory, or a list of them.
        image_available: the databases hold images (default True).
        label_available: the databases hold labels (default True).
        shard_id, num_shards, random_shuffle, initial_fill, stick_to_shard, pad_last_batch,
        prefetch_queue_depth, read_ahead, dont_use_mmap, lazy_init, skip_cached_images,
        tensor_init_bytes: as in ``fn.readers.file``.

    Raises:
        MissingExtraError: at build time without the ``lmdb`` package
            (``pip install "dlpipe[lmdb]"``).

    Example:
        >>> jpegs, labels = fn.readers.caffe(path="/data/ilsvrc12_train_lmdb",
        ...                                  random_shuffle=True, name="Reader")
        >>> images = fn.decoders.image(jpegs, device="mixed")
    """

    schema = "readers.caffe"
    num_inputs = (0, 0)
    num_outputs = 2
    is_random = True
    is_reader = True
    light = True  # an LMDB lookup and a few protobuf fields per sample

    def setup(
        self,
        *,
        path: Sequence[str] | str | None = None,
        image_available: bool = True,
        label_available: bool = True,
        shard_id: int = 0,
        num_shards: int = 1,
        random_shuffle: bool = False,
        initial_fill: int = 1024,
        stick_to_shard: bool = False,
        pad_last_batch: bool = False,
        prefetch_queue_depth: int = 1,
        read_ahead: bool = False,
        dont_use_mmap: bool = False,
        lazy_init: bool = False,
        skip_cached_images: bool = False,
        tensor_init_bytes: int = 1048576,
    ) -> None:
        self.image_available = bool(image_available)
        self.label_available = bool(label_available)
        self.num_outputs = self.image_available + self.label_available
        if not self.num_outputs:
            raise ArgumentError(
                f"{WHO}: image_available=False and label_available=False leave no output"
            )
        self.open_databases(
            path,
            WHO,
            shard_id=shard_id,
            num_shards=num_shards,
            random_shuffle=random_shuffle,
            initial_fill=initial_fill,
            stick_to_shard=stick_to_shard,
            pad_last_batch=pad_last_batch,
            read_ahead=read_ahead,
        )

    def output_layouts(self, input_layouts):
        return [""] * self.num_outputs

    def run_sample(self, inputs, args, param):
        value = self.db.read(param)
        try:
            datum = Datum(value)
        except WireError as e:
            raise DecodeError(
                f"{WHO}: error while parsing the Caffe Datum at {self.source_info(param)} "
                f"({len(value)} bytes): {e}"
            ) from None
        outs = []
        if self.image_available:
            outs.append(self._image(datum, param))
        if self.label_available:
            if datum.label is None:
                raise DecodeError(
                    f"{WHO}: the Datum at {self.source_info(param)} has no label (read it with "
                    "label_available=False)"
                )
            outs.append(np.array([datum.label], dtype=np.int32))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _image(self, datum: Datum, param: int) -> np.ndarray:
        if datum.data is None:
            raise DecodeError(
                f"{WHO}: the Datum at {self.source_info(param)} has no image data (read it "
                "with image_available=False)"
            )
        data = np.frombuffer(datum.data, dtype=np.uint8).copy()
        if datum.encoded is None or datum.encoded:
            return data
        shape = (datum.height or 0, datum.width or 0, datum.channels or 0)
        if int(np.prod(shape)) != data.size:
            raise DecodeError(
                f"{WHO}: the raw (encoded: false) Datum at {self.source_info(param)} holds "
                f"{data.size} bytes, but height x width x channels = {shape} needs "
                f"{int(np.prod(shape))}"
            )
        return data.reshape(shape)
