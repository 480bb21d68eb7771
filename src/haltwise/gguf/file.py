"""A GGUF file mapped read-only: its metadata as Python values and its tensors as views of the map.

Layout (little-endian, GGUF v2/v3):

    "GGUF" | u32 version | u64 n_tensors | u64 n_kv | n_kv x (string key, u32 type, value)
           | n_tensors x (string name, u32 n_dims, n_dims x u64 dim (fastest first), u32 type, u64 offset)
           | padding to general.alignment (default 32) | tensor data (each at data start + its offset)
    string = u64 length | UTF-8 bytes;  array = u32 element type | u64 count | elements

Why not gguf-py's GGUFReader: it builds a numpy view per metadata element, which for a vocabulary of
49k-262k strings (plus merges) takes seconds at every start. Here a metadata string array is only
walked (its length prefixes) when the file opens and decoded the first time it is read; nothing is copied
from tensor data, and the map stays read-only, so every tensor view is read-only too.

Every count, length and offset is checked against the file before it is used (a crafted file would
otherwise drive loops and allocations far beyond its size): a bad file raises ValueError naming the byte.
"""
from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

# GGUF value type -> (struct format, numpy dtype) for fixed-size scalars.
_SCALARS: dict[int, tuple[str, str]] = {
    0: ("<B", "<u1"), 1: ("<b", "<i1"), 2: ("<H", "<u2"), 3: ("<h", "<i2"),
    4: ("<I", "<u4"), 5: ("<i", "<i4"), 6: ("<f", "<f4"), 7: ("<?", "<u1"),
    10: ("<Q", "<u8"), 11: ("<q", "<i8"), 12: ("<d", "<f8"),
}
_STRING, _ARRAY, _BOOL = 8, 9, 7
_U64 = struct.Struct("<Q")
MAX_DIMS = 4
# Element views of float tensors (what gguf-py gives); block-quantized tensors are raw uint8 bytes.
_FLOAT_VIEWS = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}


class StringArray(Sequence):
    """A metadata array of strings, decoded on first access (its offsets were found when the file opened)."""

    def __init__(self, buf: mmap.mmap, starts: list[int], ends: list[int]):
        self._buf, self._starts, self._ends = buf, starts, ends
        self._decoded: list[str] | None = None

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index):
        if self._decoded is None:
            buf = self._buf
            self._decoded = [buf[a:b].decode("utf-8", errors="replace") for a, b in zip(self._starts, self._ends)]
        return self._decoded[index]

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, (list, tuple, Sequence)) else NotImplemented


@dataclass(frozen=True)
class TensorInfo:
    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]        # ggml order: fastest-varying dimension first, e.g. (in, out)
    data: np.ndarray              # 1-D read-only view of the map: float32/float16 elements, else uint8 bytes

    @property
    def n_bytes(self) -> int:
        return self.data.nbytes


class GGUFFile:
    """`metadata` (key -> str/int/float/bool, list, or StringArray) and `tensors` (in file order)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        cursor = _Cursor(self._map, 0)
        if bytes(self._map[:4]) != b"GGUF":
            raise ValueError(f"{self.path} is not a GGUF file (magic {bytes(self._map[:4])!r})")
        cursor.pos = 4
        version, n_tensors, n_kv = cursor.unpack("<IQQ")
        if version < 2:
            raise ValueError(f"{self.path}: GGUF version {version} is not supported (need >= 2)")
        cursor.need(n_kv, 8 + 4, "key/value pairs")
        self.metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cursor.string()
            self.metadata[key] = cursor.value(cursor.u32())
        cursor.need(n_tensors, 8 + 4 + 4 + 8, "tensor infos")
        infos = [_tensor_info(cursor) for _ in range(n_tensors)]
        alignment = int(self.metadata.get("general.alignment", 32))
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"{self.path}: general.alignment {alignment} is not a power of two")
        data_start = -(-cursor.pos // alignment) * alignment
        self.tensors = [self._view(data_start, *info) for info in infos]

    def drop_resident_pages(self) -> None:
        """Hand this process's resident pages of the file back to the kernel (MADV_DONTNEED). The map is
        read-only and shared, so a page read again is faulted back in from the page cache, unchanged: safe
        whatever still holds a view. The engine calls it once the kernel plan has copied the blocks it runs,
        so the file's pages are not counted twice (as copies and as mapped pages) at the peak."""
        if hasattr(mmap, "MADV_DONTNEED"):   # Linux and most Unixes; elsewhere the pages simply stay
            self._map.madvise(mmap.MADV_DONTNEED)

    def _view(self, data_start: int, name: str, shape: tuple[int, ...], qtype: GGMLQuantizationType,
              offset: int) -> TensorInfo:
        block, block_bytes = GGML_QUANT_SIZES[qtype]
        elements = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if shape[0] % block:
            raise ValueError(f"{self.path}: tensor {name}: {shape[0]} elements per row is not a multiple of "
                             f"{qtype.name}'s block of {block}")
        n_bytes = elements // block * block_bytes
        start = data_start + offset
        if start + n_bytes > len(self._map):
            raise ValueError(f"{self.path}: tensor {name} of shape {shape} needs bytes {start:,}..{start + n_bytes:,}; "
                             f"the file has {len(self._map):,}")
        data = np.frombuffer(self._map, dtype=np.uint8, count=n_bytes, offset=start)
        if qtype in _FLOAT_VIEWS:
            data = data.view(_FLOAT_VIEWS[qtype])
        return TensorInfo(name, qtype, shape, data)


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """All metadata keys of a GGUF file -> Python values (str, int, float, bool, or lists of them)."""
    meta = GGUFFile(path).metadata
    return {k: list(v) if isinstance(v, StringArray) else v for k, v in meta.items()}


def _tensor_info(cursor: "_Cursor") -> tuple[str, tuple[int, ...], GGMLQuantizationType, int]:
    name = cursor.string()
    n_dims = cursor.u32()
    if not 1 <= n_dims <= MAX_DIMS:
        raise ValueError(f"GGUF tensor {name!r}: {n_dims} dimensions (1..{MAX_DIMS} allowed)")
    shape = cursor.unpack(f"<{n_dims}Q")
    raw_type, offset = cursor.unpack("<IQ")
    try:
        qtype = GGMLQuantizationType(raw_type)
        GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError):
        raise ValueError(f"GGUF tensor {name!r}: unknown tensor type {raw_type}") from None
    if any(d == 0 or d >= 1 << 40 for d in shape):
        raise ValueError(f"GGUF tensor {name!r}: dimensions {shape} out of range")
    return name, tuple(int(d) for d in shape), qtype, int(offset)


class _Cursor:
    """Reads the header and metadata; `pos` always points at the next unread byte."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: mmap.mmap, pos: int):
        self.buf, self.pos = buf, pos

    def need(self, count: int, min_size: int, what: str) -> None:
        """`count` items of at least `min_size` bytes each must fit in what is left, else ValueError."""
        left = len(self.buf) - self.pos
        if count * min_size > left:
            raise ValueError(f"GGUF at byte {self.pos}: {count} {what} cannot fit in the {left} bytes left")

    def unpack(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        self.need(1, size, f"'{fmt}' field")
        values = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return values

    def u32(self) -> int:
        return self.unpack("<I")[0]

    def string(self) -> str:
        start, end = self._skip_string()
        return self.buf[start:end].decode("utf-8", errors="replace")

    def _skip_string(self) -> tuple[int, int]:
        (n,) = self.unpack("<Q")
        self.need(n, 1, "string bytes")
        start = self.pos
        self.pos += n
        return start, self.pos

    def _string_array(self, count: int) -> StringArray:
        """Walk `count` strings' length prefixes (a vocabulary: this loop is the whole cost of opening)."""
        buf, pos, size = self.buf, self.pos, len(self.buf)
        length_at = _U64.unpack_from
        starts, ends = [0] * count, [0] * count
        try:
            for i in range(count):
                (n,) = length_at(buf, pos)
                starts[i] = pos = pos + 8
                ends[i] = pos = pos + n
        except struct.error:
            pos = size + 1
        if pos > size:
            raise ValueError(f"GGUF at byte {self.pos}: an array of {count} strings runs past the end of the file")
        self.pos = pos
        return StringArray(buf, starts, ends)

    def value(self, vtype: int) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.unpack("<IQ")
            size = 8 if etype in (_STRING, _ARRAY) else struct.calcsize(_SCALARS[etype][0]) if etype in _SCALARS else 1
            self.need(count, size, "array elements")
            if etype == _STRING:
                return self._string_array(count)
            if etype in _SCALARS:
                dtype = np.dtype(_SCALARS[etype][1])
                arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
                self.pos += count * dtype.itemsize
                return [bool(x) for x in arr] if etype == _BOOL else arr.tolist()
            return [self.value(etype) for _ in range(count)]  # nested arrays
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype][0])[0]
        raise ValueError(f"unknown GGUF value type {vtype} at byte {self.pos}")
