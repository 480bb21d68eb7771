"""Read the key/value metadata section of a GGUF file, and nothing else.

Layout (little-endian, GGUF v2/v3):

    "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type, value) | tensor infos ...
    string = u64 length | UTF-8 bytes;  array = u32 element type | u64 count | elements

Only the key/value section is parsed: the tokenizer never needs the tensor table, so this is much
faster than a full reader (the tensor infos and data are never touched).
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np

# GGUF value type -> (struct format, numpy dtype) for fixed-size scalars.
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("<B", "<u1"), 1: ("<b", "<i1"), 2: ("<H", "<u2"), 3: ("<h", "<i2"),
    4: ("<I", "<u4"), 5: ("<i", "<i4"), 6: ("<f", "<f4"), 7: ("<?", "<u1"),
    10: ("<Q", "<u8"), 11: ("<q", "<i8"), 12: ("<d", "<f8"),
}
_STRING, _ARRAY, _BOOL = 8, 9, 7


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """All metadata keys of a GGUF file -> Python values (str, int, float, bool, or lists of them)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (magic {bytes(buf[:4])!r})")
        version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported (need >= 2)")
        reader = _Reader(buf, 4 + 4 + 8 + 8)
        reader.need(n_kv, 8 + 4, "key/value pairs")
        out: dict[str, Any] = {}
        for _ in range(n_kv):
            key = reader.string()
            out[key] = reader.value(reader.u32())
        return out


class _Reader:
    """A cursor over the metadata bytes; `pos` always points at the next unread byte."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: mmap.mmap, pos: int):
        self.buf = buf
        self.pos = pos

    def need(self, count: int, min_size: int, what: str) -> None:
        """`count` items of at least `min_size` bytes each must fit in what is left, else ValueError (a crafted
        count would otherwise drive a loop or an allocation far beyond the file)."""
        left = len(self.buf) - self.pos
        if count * min_size > left:
            raise ValueError(f"GGUF metadata at byte {self.pos}: {count} {what} cannot fit in the {left} bytes left")

    def u32(self) -> int:
        (v,) = struct.unpack_from("<I", self.buf, self.pos)
        self.pos += 4
        return v

    def u64(self) -> int:
        (v,) = struct.unpack_from("<Q", self.buf, self.pos)
        self.pos += 8
        return v

    def string(self) -> str:
        n = self.u64()
        self.need(n, 1, "string bytes")
        s = self.buf[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.u32(), self.u64()
            self.need(count, 8 if etype == _STRING else struct.calcsize(_SCALARS[etype][0]) if etype in _SCALARS else 1,
                      "array elements")
            if etype == _STRING:
                return [self.string() for _ in range(count)]
            if etype in _SCALARS:
                dtype = np.dtype(_SCALARS[etype][1])
                arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
                self.pos += count * dtype.itemsize
                return [bool(x) for x in arr] if etype == _BOOL else arr.tolist()
            return [self.value(etype) for _ in range(count)]  # nested arrays
        if vtype in _SCALARS:
            fmt = _SCALARS[vtype][0]
            (v,) = struct.unpack_from(fmt, self.buf, self.pos)
            self.pos += struct.calcsize(fmt)
            return v
        raise ValueError(f"unknown GGUF value type {vtype} at byte {self.pos}")
