"""The protobuf wire format, decoded by hand: enough for the readers' messages (TFRecord's
``tf.train.Example``, Caffe's ``Datum``, Caffe2's ``TensorProtos``) without protobuf installed.

A message is a run of fields ``key | value`` where ``key = field_number << 3 | wire_type``:
wire type 0 a varint, 1 eight bytes, 2 a varint length then that many bytes (a string, a
sub-message or a *packed* run of scalars), 5 four bytes. A repeated scalar may come packed or
one value per field, and a parser must take both (proto2 and proto3 writers differ).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class WireError(ValueError):
    """Malformed wire data (the caller adds which file and record)."""


def varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at ``pos`` (at most 10 bytes, below ``end``)."""
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def fields(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, object]]:
    """Yield (field number, wire type, value) over one message in ``buf[pos:end]``.

    Values: an int (wire 0), 8 or 4 raw bytes (wire 1, 5), or the (start, stop) slice of a
    length-delimited value (wire 2), so sub-messages parse in place without copies.
    """
    while pos < end:
        key, pos = varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos = varint(buf, pos, end)
        elif wire == 1:
            if pos + 8 > end:
                raise WireError("truncated fixed64")
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = varint(buf, pos, end)
            if pos + size > end:
                raise WireError(f"length-delimited field {field} runs past its message")
            value, pos = (pos, pos + size), pos + size
        elif wire == 5:
            if pos + 4 > end:
                raise WireError("truncated fixed32")
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise WireError(f"unsupported wire type {wire} (field {field})")
        yield field, wire, value


def packed_varints(buf: bytes, start: int, stop: int) -> np.ndarray:
    """Decode a packed run of varints as int64 (two's complement), vectorised."""
    arr = np.frombuffer(buf, dtype=np.uint8, count=stop - start, offset=start)
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr[-1] & 0x80:
        raise WireError("truncated packed varint")
    ends = np.flatnonzero(arr < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    if (ends - starts).max() >= 10:
        raise WireError("varint longer than 10 bytes")
    pos = np.arange(arr.size) - np.repeat(starts, ends - starts + 1)
    parts = (arr & 0x7F).astype(np.uint64) << (7 * pos).astype(np.uint64)
    return np.bitwise_or.reduceat(parts, starts).view(np.int64)


def repeated_varints(buf: bytes, wire: int, value, what: str) -> np.ndarray:
    """The int64 values one field of a repeated varint holds: one value (wire 0) or a packed
    run (wire 2). ``what`` names the field in errors."""
    if wire == 0:
        return np.array([value & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64).view(np.int64)
    if wire == 2:
        return packed_varints(buf, *value)
    raise WireError(f"{what} has wire type {wire}")


def repeated_floats(buf: bytes, wire: int, value, what: str) -> np.ndarray:
    """The float32 values one field of a repeated float holds: one (wire 5) or packed (wire 2)."""
    if wire == 5:
        return np.frombuffer(value, dtype="<f4")
    if wire == 2:
        a, b = value
        if (b - a) % 4:
            raise WireError(f"packed {what} length is not a multiple of 4")
        return np.frombuffer(buf, dtype="<f4", count=(b - a) // 4, offset=a)
    raise WireError(f"{what} has wire type {wire}")


def as_int32(value: int) -> int:
    """An ``int32`` field's value: varints of negative int32 are 64-bit two's complement."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value
