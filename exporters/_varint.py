"""Protobuf base-128 varints: the one reader and the one writer every hand-written wire path uses.

(The vectorised reader in :mod:`._wire` decodes many varints at once with numpy; it is the array form of
:func:`read_varint`, not a copy.)
"""

from __future__ import annotations

from typing import Final


def read_varint(data: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it.

    Raises
    ------
    IndexError
        When ``data`` ends inside the varint.
    """
    value = shift = 0
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


_SHORT: Final = [bytes((v,)) if v < 0x80 else bytes(((v & 0x7F) | 0x80, v >> 7)) for v in range(1 << 14)]
