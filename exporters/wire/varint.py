"""Protobuf base-128 varints: the one reader and the one writer every hand-written wire path uses.

(:func:`tailcut.exporters.wire.columns.varints` is the array form of :func:`read_varint`, decoding a
varint at each of many positions with numpy; it is not a copy.)
"""

from __future__ import annotations

from typing import Final


def read_varint(data: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it.

    One- and two-byte varints (lengths below 16 KiB, small integers: nearly all of them) take no loop.

    Raises
    ------
    IndexError
        When ``data`` ends inside the varint.
    """
    byte = data[position]
    if byte < 0x80:
        return byte, position + 1
    second = data[position + 1]
    if second < 0x80:
        return (byte & 0x7F) | second << 7, position + 2
    value = (byte & 0x7F) | (second & 0x7F) << 7
    shift = 14
    position += 2
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def encode_varint(value: int) -> bytes:
    """``value`` (0 <= value < 2**64) as a varint; values below 2**14 come from a table."""
    if value < len(_SHORT):
        return _SHORT[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def short_values(prefix: bytes) -> dict[bytes, int]:
    """``prefix`` followed by each varint below 2**14, mapped to its value.

    Where a field's whole encoding is a short varint after a known tag (an integer attribute's
    ``AnyValue``), one dict lookup decodes it faster than a call of :func:`read_varint`.
    """
    return {prefix + encoded: value for value, encoded in enumerate(_SHORT)}


_SHORT: Final = [bytes((v,)) if v < 0x80 else bytes(((v & 0x7F) | 0x80, v >> 7)) for v in range(1 << 14)]
