"""``fn.readers.caffe2``: samples from Caffe2 LMDB databases, without Caffe2 or protobuf.

Each LMDB value is a serialized ``caffe2.TensorProtos`` (``repeated TensorProto protos = 1``),
a ``TensorProto`` being::

    repeated int64 dims = 1;  optional DataType data_type = 2 [default = FLOAT];
    repeated float float_data = 3;  repeated int32 int32_data = 4;  optional bytes byte_data = 5;
    repeated bytes string_data = 6;  repeated int64 int64_data = 10;  (and others, skipped)

with DataType FLOAT = 1, INT32 = 2, BYTE = 3, STRING = 4, INT64 = 10. As in DALI's
``Caffe2Parser``, the tensors are taken in order: the image (if ``image_available``), the label
(unless ``label_type`` is NO_LABEL), for the sparse label types one more tensor (the weights of
MULTI_LABEL_WEIGHTED_SPARSE; skipped for MULTI_LABEL_SPARSE too, as DALI does), then
``additional_inputs`` tensors, then the bounding box (``bbox``).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum

import numpy as np

from ..errors import ArgumentError, DecodeError
from ..graph import Operator, register
from ._lmdb import LMDBReader
from ._protobuf import WireError, fields, repeated_floats, repeated_varints

WHO = "readers.caffe2"


class LabelType(IntEnum):
    """Caffe2's label kinds (``caffe2/image/image_input.h``), DALI's ``label_type`` values."""

    SINGLE_LABEL = 0  # one integer (or float) label
    MULTI_LABEL_SPARSE = 1  # the indices of the active classes -> a num_labels 0/1 vector
    MULTI_LABEL_DENSE = 2  # a dense label vector, as stored
    MULTI_LABEL_WEIGHTED_SPARSE = 3  # active indices + their weights -> a num_labels vector
    NO_LABEL = 4


# TensorProto.DataType values used here.
FLOAT, INT32, BYTE, STRING, INT64 = 1, 2, 3, 4, 10
_TYPE_NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "INT32", 3: "BYTE", 4: "STRING", 5: "BOOL"}
_TYPE_NAMES.update({6: "UINT8", 7: "INT8", 8: "UINT16", 9: "INT16", 10: "INT64", 12: "FLOAT16"})
_TYPE_NAMES[13] = "DOUBLE"


def _type_name(t: int) -> str:
    return _TYPE_NAMES.get(t, str(t))


class TensorProto:
    """The fields of one ``caffe2.TensorProto`` the reader uses."""

    __slots__ = ("dims", "data_type", "floats", "int32s", "int64s", "byte_data", "strings")

    def __init__(self, buf: bytes, start: int, stop: int):
        dims, floats, int32s, int64s = [], [], [], []
        self.data_type = FLOAT
        self.byte_data = b""
        self.strings: list[bytes] = []
        for field, wire, value in fields(buf, start, stop):
            if field == 1:
                dims.append(repeated_varints(buf, wire, value, "TensorProto.dims"))
            elif field == 2:
                if wire != 0:
                    raise WireError(f"TensorProto.data_type has wire type {wire}")
                self.data_type = value
            elif field == 3:
                floats.append(repeated_floats(buf, wire, value, "TensorProto.float_data"))
            elif field == 4:
                int32s.append(repeated_varints(buf, wire, value, "TensorProto.int32_data"))
            elif field == 10:
                int64s.append(repeated_varints(buf, wire, value, "TensorProto.int64_data"))
            elif field in (5, 6):
                if wire != 2:
                    raise WireError(f"TensorProto field {field} has wire type {wire}")
                data = buf[value[0] : value[1]]
                if field == 5:
                    self.byte_data = data
                else:
                    self.strings.append(data)
        self.dims = _cat(dims, np.int64)
        self.floats = _cat(floats, np.float32)
        self.int32s = _cat(int32s, np.int64).astype(np.int32)  # int32 varints wrap to int32
        self.int64s = _cat(int64s, np.int64)

    def values(self) -> np.ndarray:
        """The numeric data of a FLOAT / INT32 / INT64 tensor (1-D); else ValueError."""
        if self.data_type == FLOAT:
            return self.floats
        if self.data_type == INT32:
            return self.int32s
        if self.data_type == INT64:
            return self.int64s
        raise ValueError(f"unsupported data_type {_type_name(self.data_type)}")


def _cat(parts: list[np.ndarray], dtype) -> np.ndarray:
    if not parts:
        return np.empty(0, dtype=dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def parse_tensor_protos(buf: bytes) -> list[TensorProto]:
    """The tensors of a serialized ``caffe2.TensorProtos``.

    Raises:
        WireError: malformed wire data.
    """
    protos = []
    for field, wire, value in fields(buf, 0, len(buf)):
        if field == 1:
            if wire != 2:
                raise WireError(f"TensorProtos.protos has wire type {wire}")
            protos.append(TensorProto(buf, *value))
    return protos


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ArgumentError(f"{WHO}: {name}={value!r} must be an integer >= {minimum}")
    return int(value)


@register(legacy=("Caffe2Reader",))
class Caffe2Reader(LMDBReader, Operator):
    """Reads samples from Caffe2 LMDB databases (the ``lmdb`` package, no Caffe2).

    Outputs, in order (DALI's):

    * the image, if ``image_available``: a STRING tensor's first string as 1-D uint8 (an
      encoded image), or a BYTE tensor's pixels as (H, W, C) uint8 (C = 1 with 2 dims);
    * the label, unless ``label_type`` is NO_LABEL (4), of the label tensor's type (INT32 ->
      int32, FLOAT -> float32): SINGLE_LABEL (0) its one value, shape (1,);
      MULTI_LABEL_SPARSE (1) a (num_labels,) vector with 1 at the stored indices;
      MULTI_LABEL_DENSE (2) the stored values; MULTI_LABEL_WEIGHTED_SPARSE (3) a float32
      (num_labels,) vector with the next tensor's weights at the stored indices;
    * ``additional_inputs`` tensors (FLOAT, INT32 or INT64), 1-D each;
    * the bounding box if ``bbox``: the last tensor, INT32 with 4 values;
    * with the sparse label types, one more output: DALI declares it but never fills it; here
      it holds the stored active indices, as stored (1-D).

    All databases form one dataset in key order, sharded by entry index, with no global
    shuffle (only the ``initial_fill`` buffer). ``source_info`` is ``"<db> at key <key>"``.

    Args:
        path: the LMDB directory, or a list of them.
        image_available: the first tensor is the image (default True).
        label_type: 0..4 as above (default 0, SINGLE_LABEL).
        num_labels: the number of classes, the length of the sparse label vectors (default 1).
        additional_inputs: auxiliary tensors after the label (default 0).
        bbox: a bounding box tensor ends each entry (default False).
        shard_id, num_shards, random_shuffle, initial_fill, stick_to_shard, pad_last_batch,
        prefetch_queue_depth, read_ahead, dont_use_mmap, lazy_init, skip_cached_images,
        tensor_init_bytes: as in ``fn.readers.file``.

    Raises:
        MissingExtraError: at build time without the ``lmdb`` package
            (``pip install "dlpipe[lmdb]"``).

    Example:
        >>> jpegs, labels = fn.readers.caffe2(path="/data/mnist/training", random_shuffle=True,
        ...                                   name="Reader")
        >>> labels = fn.reshape(labels, shape=[])
    """

    schema = "readers.caffe2"
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
        label_type: int = 0,
        num_labels: int = 1,
        additional_inputs: int = 0,
        bbox: bool = False,
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
        try:
            self.label_type = LabelType(_check_int(label_type, "label_type", 0))
        except ValueError:
            raise ArgumentError(
                f"{WHO}: label_type={label_type!r} must be 0 (SINGLE_LABEL), 1 "
                "(MULTI_LABEL_SPARSE), 2 (MULTI_LABEL_DENSE), 3 (MULTI_LABEL_WEIGHTED_SPARSE) "
                "or 4 (NO_LABEL)"
            ) from None
        self.num_labels = _check_int(num_labels, "num_labels", 1)
        self.additional_inputs = _check_int(additional_inputs, "additional_inputs", 0)
        self.image_available = bool(image_available)
        self.bbox = bool(bbox)
        self.sparse = self.label_type in (
            LabelType.MULTI_LABEL_SPARSE,
            LabelType.MULTI_LABEL_WEIGHTED_SPARSE,
        )
        has_label = self.label_type != LabelType.NO_LABEL
        self.num_outputs = (
            self.image_available + has_label + self.sparse + self.additional_inputs + self.bbox
        )
        if not self.num_outputs:
            raise ArgumentError(
                f"{WHO}: image_available=False with label_type=4 (NO_LABEL), no additional "
                "inputs and no bbox leave no output"
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
        where = self.source_info(param)
        try:
            protos = parse_tensor_protos(value)
        except WireError as e:
            raise DecodeError(
                f"{WHO}: error while parsing the Caffe2 TensorProtos at {where} "
                f"({len(value)} bytes): {e}"
            ) from None
        try:
            outs = self._outputs(protos)
        except ValueError as e:
            raise DecodeError(f"{WHO}: the TensorProtos at {where}: {e}") from None
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _outputs(self, protos: list[TensorProto]) -> list[np.ndarray]:
        def proto(k: int, what: str) -> TensorProto:
            if k >= len(protos):
                raise ValueError(f"holds {len(protos)} tensors; the {what} would be tensor {k}")
            return protos[k]

        outs, k = [], 0
        if self.image_available:
            outs.append(_image(proto(0, "image")))
            k = 1
        extra = None
        if self.label_type != LabelType.NO_LABEL:
            label, extra = self._label(protos, k, proto)
            outs.append(label)
            k += 1 + self.sparse
        for j in range(self.additional_inputs):
            t = proto(k + j, f"additional input {j}")
            try:
                outs.append(t.values().copy())
            except ValueError as e:
                raise ValueError(f"additional input {j} (tensor {k + j}): {e}") from None
        k += self.additional_inputs
        if self.bbox:
            t = proto(k, "bounding box")
            if t.data_type != INT32 or t.int32s.size != 4:
                raise ValueError(
                    f"the bounding box (tensor {k}) must be INT32 with 4 values, got "
                    f"{_type_name(t.data_type)} with {t.int32s.size} int32 values"
                )
            outs.append(t.int32s.copy())
        if extra is not None:
            outs.append(extra)
        return outs

    def _label(self, protos, k: int, proto) -> tuple[np.ndarray, np.ndarray | None]:
        t = proto(k, "label")
        if t.data_type not in (FLOAT, INT32):
            raise ValueError(
                f"unsupported label data_type {_type_name(t.data_type)} (tensor {k}); "
                "labels are FLOAT or INT32"
            )
        values = t.values()
        kind = self.label_type
        if kind == LabelType.SINGLE_LABEL:
            if values.size != 1:
                raise ValueError(
                    f"SINGLE_LABEL needs one label value, tensor {k} has {values.size}"
                )
            return values.copy(), None
        if kind == LabelType.MULTI_LABEL_DENSE:
            return values.copy(), None
        index = values.astype(np.int64)  # DALI: static_cast<int>, also of float indices
        bad = (index < 0) | (index >= self.num_labels)
        if bad.any():
            raise ValueError(
                f"Label index out of bounds: {int(index[bad][0])} is not in [0, "
                f"num_labels={self.num_labels})"
            )
        if kind == LabelType.MULTI_LABEL_SPARSE:
            label = np.zeros(self.num_labels, dtype=values.dtype)
            label[index] = 1
            return label, values.copy()
        weights = proto(k + 1, "label weights")
        if weights.floats.size < index.size:
            raise ValueError(
                f"{index.size} label indices (tensor {k}) but {weights.floats.size} FLOAT "
                f"weights (tensor {k + 1})"
            )
        label = np.zeros(self.num_labels, dtype=np.float32)
        label[index] = weights.floats[: index.size]
        return label, values.copy()


def _image(t: TensorProto) -> np.ndarray:
    if t.data_type == STRING:
        if not t.strings:
            raise ValueError("the image tensor (STRING) holds no string")
        return np.frombuffer(t.strings[0], dtype=np.uint8).copy()
    if t.data_type == BYTE:
        if t.dims.size not in (2, 3):
            raise ValueError(f"the image tensor (BYTE) has dims {t.dims.tolist()}; need H, W[, C]")
        h, w = int(t.dims[0]), int(t.dims[1])
        c = int(t.dims[2]) if t.dims.size == 3 else 1
        if h * w * c != len(t.byte_data) or min(h, w, c) < 0:
            raise ValueError(
                f"Image data size mismatch: dims {[h, w, c]} need {h * w * c} bytes, byte_data "
                f"holds {len(t.byte_data)}"
            )
        return np.frombuffer(t.byte_data, dtype=np.uint8).reshape(h, w, c).copy()
    raise ValueError(
        f"unsupported image data_type {_type_name(t.data_type)}; the image is STRING (encoded) "
        "or BYTE (raw pixels)"
    )
