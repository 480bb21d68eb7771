"""The file that holds a model's regrouped weight records (kernels/record_cache.py): its layout, its writer
and its reader.

    MAGIC | entries, each at a page-aligned offset | header JSON | u64 header offset | u64 header length | MAGIC
      header: {name: {"source": what it was made from, "code": records code, "shape": [rows, bytes],
                      "offset": bytes from the file's start}}

The header comes last, so entries can be written one by one as a plan makes them (`RecordWriter.add`) and
a mapped entry can be used as soon as it is written: a mixture-of-experts model larger than the memory
has its experts' records written to the file and mapped from it, never all held in memory at once. A file
is whole only once `finish()` wrote the footer, synced it and renamed it into place: until then it is a temp file
named after its writer's pid (a dead writer's is removed by record_cache._remove_others).
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"HWX8\x00\x00\x00\x02"
_FOOTER = struct.Struct("<QQ")          # header offset, header length


@dataclass(frozen=True, slots=True)
class Entry:
    source: str                          # the qtypes and shapes of the shards the records were made from
    code: int                            # the X8 records code (repack.py)
    rows: int
    width: int
    offset: int                          # bytes from the file's start, page-aligned


class RecordWriter:
    """Appends entries to a temp file beside `path` (None: an unnamed file in `spill_dir`, gone at exit)."""

    def __init__(self, path: Path | None, spill_dir: Path):
        self.path = path
        if path is None:
            spill_dir.mkdir(parents=True, exist_ok=True)
            self._file = tempfile.TemporaryFile(dir=spill_dir)     # unlinked at once: no name to leak
            self.tmp = None
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            self._file = open(self.tmp, "w+b")
            self._file.write(MAGIC)
        self._lock = threading.Lock()
        self._end = page_round(len(MAGIC))
        self.entries: dict[str, Entry] = {}

    def add(self, name: str, source: str, code: int, records: np.ndarray) -> None:
        """Write `records` as entry `name`. Thread-safe: the space is reserved under a lock, written outside it."""
        data = np.ascontiguousarray(records)
        offset = self._claim(data.nbytes)
        view = memoryview(data).cast("B")
        done = 0
        while done < data.nbytes:
            done += os.pwrite(self._file.fileno(), view[done:], offset + done)
        self._entered(name, Entry(source, int(code), data.shape[0], data.shape[1], offset))

    def reserve(self, name: str, source: str, code: int, shape: tuple[int, int]) -> np.ndarray:
        """Entry `name`'s space in the file, allocated on disk (OSError when the disk is full: never a fault on
        a later write) and mapped shared and writable: what is written into it is the file's, its pages the
        page cache's, read back in as touched and dropped under pressure. The caller fills it, then only
        reads it."""
        rows, width = shape
        offset = self._claim(rows * width)
        os.posix_fallocate(self._file.fileno(), offset, page_round(rows * width))
        region = mmap.mmap(self._file.fileno(), rows * width, access=mmap.ACCESS_WRITE, offset=offset)
        self._entered(name, Entry(source, int(code), rows, width, offset))
        return np.frombuffer(region, np.uint8, rows * width).reshape(rows, width)

    def _claim(self, nbytes: int) -> int:
        with self._lock:
            offset, self._end = self._end, self._end + page_round(nbytes)
        return offset

    def _entered(self, name: str, entry: Entry) -> None:
        with self._lock:
            self.entries[name] = entry

    def finish(self) -> None:
        """Write the header and footer and rename the file into place (nothing to do for an unnamed file)."""
        if self.path is None:
            return
        with self._lock:
            header = json.dumps({n: {"source": e.source, "code": e.code, "shape": [e.rows, e.width],
                                     "offset": e.offset} for n, e in self.entries.items()}).encode()
            end = self._end
        self._file.seek(end)
        self._file.write(header + _FOOTER.pack(end, len(header)) + MAGIC)
        self._file.truncate()
        self._file.flush()
        os.fsync(self._file.fileno())     # on disk before it has its name: a power cut never leaves a named file
        self._file.close()                # whose entries are zeros (the reader checks the layout, not the bytes)
        os.replace(self.tmp, self.path)

    def abandon(self) -> None:
        """Close and remove the temp file (maps of its entries stay valid until dropped)."""
        self._file.close()
        if self.tmp is not None:
            self.tmp.unlink(missing_ok=True)


def read_entries(data: mmap.mmap) -> dict[str, Entry]:
    """The entries of a whole record file's map; ValueError for a file that is not one or is cut short."""
    size = len(data)
    tail = _FOOTER.size + len(MAGIC)
    if size < len(MAGIC) + tail or data[:len(MAGIC)] != MAGIC or data[size - len(MAGIC):] != MAGIC:
        raise ValueError("not a record file of this version (or cut short)")
    start, length = _FOOTER.unpack_from(data, size - tail)
    if start + length != size - tail:
        raise ValueError("its footer does not point at its header")
    entries = {}
    for name, e in json.loads(bytes(data[start:start + length])).items():
        rows, width = e["shape"]
        entry = Entry(str(e["source"]), int(e["code"]), int(rows), int(width), int(e["offset"]))
        if entry.offset % mmap.PAGESIZE or entry.offset < len(MAGIC) or entry.offset + rows * width > start:
            raise ValueError(f"entry {name} lies outside the entries")
        entries[name] = entry
    return entries


def page_round(nbytes: int) -> int:
    return -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
