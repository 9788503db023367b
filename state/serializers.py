"""Byte layouts of keyed state: canonical keys and namespaces, pickled values.

Keys are encoded canonically *and* decodably: equal dict keys give equal bytes (``1`` and
``1.0`` are one key, as in a Python dict), and the bytes decode back to the key, so a
snapshot written by one backend restores into the other and timers fire with their key.

Example:
    >>> decode_key(encode_key(("user", 7)))
    ('user', 7)
    >>> encode_key(1) == encode_key(1.0)
    True
"""

from __future__ import annotations

import datetime
import itertools
import pickle
import struct
from collections.abc import Iterable
from typing import Any

from weir.core import relocations

_NONE, _FALSE, _TRUE, _INT, _BIGINT, _FLOAT, _STR, _BYTES, _TUPLE, _DATE, _DATETIME = range(11)
_PICKLED = 0xFF
_STR_TAG = bytes((_STR,))
_NONE_KEY = bytes((_NONE,))
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_U32 = struct.Struct(">I")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def encode_key(key: Any) -> bytes:
    """Canonical bytes of a key or namespace (see the module docstring)."""
    if type(key) is str:  # the most common key, first
        return _STR_TAG + key.encode("utf-8", "surrogatepass")
    if key is None:  # the namespace of every state outside windows
        return _NONE_KEY
    if isinstance(key, bool):
        return bytes((_TRUE if key else _FALSE,))
    if isinstance(key, int):
        if _INT64_MIN <= key <= _INT64_MAX:
            return bytes((_INT,)) + _I64.pack(key)
        return bytes((_BIGINT,)) + str(key).encode("ascii")
    if isinstance(key, float):
        if key.is_integer() and _INT64_MIN <= key <= _INT64_MAX:
            return bytes((_INT,)) + _I64.pack(int(key))
        return bytes((_FLOAT,)) + _F64.pack(key)
    if isinstance(key, str):
        return bytes((_STR,)) + key.encode("utf-8", "surrogatepass")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes((_BYTES,)) + bytes(key)
    if isinstance(key, datetime.datetime):
        return bytes((_DATETIME,)) + key.isoformat().encode("ascii")
    if isinstance(key, datetime.date):
        return bytes((_DATE,)) + key.isoformat().encode("ascii")
    if type(key) is tuple:
        parts = [bytes((_TUPLE,)), _U32.pack(len(key))]
        for element in key:
            encoded = encode_key(element)
            parts.append(_U32.pack(len(encoded)))
            parts.append(encoded)
        return b"".join(parts)
    # Anything else (a Row, a NamedTuple, a dataclass window) round-trips through pickle:
    # decodable, and canonical for equal values of the same type.
    return bytes((_PICKLED,)) + pickle.dumps(key, protocol=5)


def decode_key(data: bytes | memoryview) -> Any:
    """The key whose :func:`encode_key` bytes are ``data``."""
    value, end = _decode(memoryview(data), 0)
    if end != len(data):
        msg = f"{len(data) - end} stray bytes after an encoded key"
        raise ValueError(msg)
    return value


def _decode(view: memoryview, position: int, end: int | None = None) -> tuple[Any, int]:
    end = len(view) if end is None else end
    tag = view[position]
    body = position + 1
    if tag == _NONE:
        return None, body
    if tag in (_FALSE, _TRUE):
        return tag == _TRUE, body
    if tag == _INT:
        return _I64.unpack_from(view, body)[0], body + 8
    if tag == _FLOAT:
        return _F64.unpack_from(view, body)[0], body + 8
    if tag == _TUPLE:
        (count,) = _U32.unpack_from(view, body)
        position = body + 4
        elements = []
        for _ in range(count):
            (length,) = _U32.unpack_from(view, position)
            element, stop = _decode(view, position + 4, position + 4 + length)
            elements.append(element)
            position = stop
        return tuple(elements), position
    raw = bytes(view[body:end])
    if tag == _BIGINT:
        return int(raw.decode("ascii")), end
    if tag == _STR:
        return raw.decode("utf-8", "surrogatepass"), end
    if tag == _BYTES:
        return raw, end
    if tag == _DATETIME:
        return datetime.datetime.fromisoformat(raw.decode("ascii")), end
    if tag == _DATE:
        return datetime.date.fromisoformat(raw.decode("ascii")), end
    if tag == _PICKLED:
        return relocations.loads(raw), end
    msg = f"unknown key tag {tag}"
    raise ValueError(msg)


#: The pickle protocol of stored values.
VALUE_PROTOCOL = 5


def serialize_value(value: Any) -> bytes:
    return pickle.dumps(value, protocol=VALUE_PROTOCOL)


def serialize_values(values: Iterable[Any]) -> list[bytes]:
    """``serialize_value`` of each of ``values``, in one C-level loop (no Python call per
    value): what a snapshot encodes by the thousand."""
    return list(map(pickle.dumps, values, itertools.repeat(VALUE_PROTOCOL)))


def deserialize_value(data: bytes | memoryview) -> Any:
    return relocations.loads(data)
