"""Regrouped weight records kept on disk between starts, so a second start regroups nothing (issue 25).

Every GGUF linear that runs natively is regrouped 8 rows at a time (native/repack.py) when it is
prepared: Qwen2.5-Coder-0.5B's 485 MB of blocks cost ~1.2 s of CPU on the start's two cores, beside the
imports and the tokenizer, plus the first touch of 485 MB of fresh memory. The first start writes the
records its plan runs to one file per model; later starts read the file into anonymous memory (huge
pages where offered: the kernels stream it faster than a map of the page cache, _anonymous_copy) and hand
slices of it to the kernels: no regrouping.

    $HALTWISE_CACHE_DIR/records/<gguf stem>-<file id>-<key>.x8
      = MAGIC | u64 header length | header JSON | zero padding to a page | entry data, each page-aligned
      header: {name: {"source": what it was made from, "code": records code, "shape": [rows, bytes],
                      "offset": bytes from the file's start}}

key: the GGUF's resolved path, size and mtime (a changed file is a miss, never a stale hit) and a digest
of the regrouping's code (repack.cpp, repack.py): a changed layout is a miss too. An entry is used only
if its `source` (qtypes and shapes of the shards it was made from) equals the asking linear's. A file
that is not ours or is writable by others (cache_trust.py), or whose header does not parse or whose
entries run past its end, is not used (logged). The file is written after the plan is applied, by a
background thread (temp file + rename); it replaces the model's older files (other keys, same GGUF).
Models under MIN_CACHED_BYTES of records are not cached (they regroup in milliseconds).
HALTWISE_RECORD_CACHE=0 turns it off.
"""
from __future__ import annotations

import glob
import hashlib
import json
import logging
import mmap
import os
import struct
import threading
from pathlib import Path

import numpy as np

from haltwise.kernels.cache_trust import first_distrust

log = logging.getLogger("haltwise.kernels")

MAGIC = b"HWX8\x00\x00\x00\x01"
MIN_CACHED_BYTES = 16 * 2**20
_LENGTH = struct.Struct("<Q")
_CODE_FILES = (Path(__file__).parent / "native" / "csrc" / "repack.cpp", Path(__file__).parent / "native" / "repack.py")


class RecordCache:
    """get(name, source) -> (records, code) or None; put(...) what was made; save() writes a new file if
    anything was put. Thread-safe: a plan prepares its linears on several threads."""

    def __init__(self, path: Path | None):
        self.path = path                                    # None: nothing is read or written
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str, int, np.ndarray]] = {}   # name -> (source, code, records)
        self._used: set[str] = set()
        self._added = False
        self.hits = 0
        if path is not None and path.is_file():
            self._entries = _read(path)

    @classmethod
    def for_model(cls, gguf: Path) -> "RecordCache":
        """The cache of a GGUF file (off: a cache that never reads or writes)."""
        if os.environ.get("HALTWISE_RECORD_CACHE", "1") == "0":
            return cls(None)
        st = gguf.stat()
        resolved = str(gguf.resolve())
        code = hashlib.sha256(b"".join(p.read_bytes() for p in _CODE_FILES)).hexdigest()
        key = hashlib.sha256(f"{resolved}|{st.st_size}|{st.st_mtime_ns}|{code}".encode()).hexdigest()[:16]
        file_id = hashlib.sha256(resolved.encode()).hexdigest()[:8]
        return cls(_root() / f"{gguf.stem}-{file_id}-{key}.x8")

    def get(self, name: str, source: str) -> tuple[np.ndarray, int] | None:
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry[0] != source:
                return None
            self._used.add(name)
            self.hits += 1
            return entry[2], entry[1]

    def put(self, name: str, source: str, records: np.ndarray, code: int) -> None:
        with self._lock:
            self._entries[name] = (source, code, records)
            self._used.add(name)
            self._added = True

    def save(self) -> threading.Thread | None:
        """Write every entry used since opening, in a daemon thread, if any was made here (else None)."""
        with self._lock:
            if self.path is None or not self._added:
                return None
            used = {name: self._entries[name] for name in sorted(self._used)}
            self._added = False
        if sum(records.nbytes for _, _, records in used.values()) < MIN_CACHED_BYTES:
            return None
        thread = threading.Thread(target=_write, args=(self.path, used), name="haltwise-record-cache", daemon=True)
        thread.start()
        return thread


def _root() -> Path:
    return Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise")) / "records"


def _read(path: Path) -> dict[str, tuple[str, int, np.ndarray]]:
    """The entries of a cache file as views of one anonymous copy of it (_anonymous_copy); {} (logged) for a
    file not to be used. The views are writable numpy arrays as torch wants them; nothing writes to them."""
    why = first_distrust(path.parent, path)
    if why is not None:
        log.warning("not using regrouped weight records %s: %s", path, why)
        return {}
    try:
        with open(path, "rb") as f:
            data = _anonymous_copy(f)
        if data[:len(MAGIC)] != MAGIC:
            raise ValueError("not a record file")
        (length,) = _LENGTH.unpack_from(data, len(MAGIC))
        start = len(MAGIC) + _LENGTH.size
        header = json.loads(bytes(data[start:start + length]))
        entries = {}
        for name, e in header.items():
            rows, width = e["shape"]
            if e["offset"] < start + length or e["offset"] + rows * width > len(data):
                raise ValueError(f"entry {name} runs past the file")
            view = np.frombuffer(data, np.uint8, rows * width, e["offset"]).reshape(rows, width)
            entries[name] = (e["source"], int(e["code"]), view)
        return entries
    except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
        log.warning("ignoring regrouped weight records %s: %s", path, e)
        return {}


def _anonymous_copy(f) -> mmap.mmap:
    """The whole file read into private anonymous memory, asked for transparent huge pages where the
    kernel offers them (HALTWISE_RECORD_HUGE=0: not asked). Not the file's own pages: a decode step streams
    every record once, and on the 1.5B a greedy decode ran 15.5 tok/s from a map of the page cache, 17.7
    from anonymous 4K pages, 19.4 from huge pages (medians of 6, alternating: docs/benchmarks.md). The cost:
    a later start reads the file (~1 GB: 0.3-0.5 s, plus 1-2.5 s where the kernel must compact memory for
    huge pages), and servers no longer share the file's page-cache pages."""
    size = os.fstat(f.fileno()).st_size
    data = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE") and os.environ.get("HALTWISE_RECORD_HUGE", "1") != "0":
        try:
            data.madvise(mmap.MADV_HUGEPAGE)
        except OSError:                         # a kernel without THP: 4K pages, still anonymous
            pass
    view = memoryview(data)
    done = 0
    while done < size:
        n = f.readinto(view[done:])
        if not n:
            raise ValueError("the file ended early")
        done += n
    view.release()
    return data


def _write(path: Path, entries: dict[str, tuple[str, int, np.ndarray]]) -> None:
    header: dict[str, dict] = {}
    size = 0                                    # entry bytes, each entry rounded up to whole pages
    for name, (source, code, records) in entries.items():
        header[name] = {"source": source, "code": code, "shape": list(records.shape), "offset": size}
        size += _pages(records.nbytes)
    start = 0                                   # where the entries begin: a page after the header, which
    while True:                                 # holds their offsets (so its length depends on start)
        text = json.dumps({n: dict(e, offset=e["offset"] + start) for n, e in header.items()}).encode()
        if _pages(len(MAGIC) + _LENGTH.size + len(text)) <= start:
            break
        start = _pages(len(MAGIC) + _LENGTH.size + len(text))
    text = text.ljust(start - len(MAGIC) - _LENGTH.size, b" ")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(MAGIC + _LENGTH.pack(len(text)) + text)
            for name, (_, _, records) in entries.items():
                f.seek(start + header[name]["offset"])
                f.write(np.ascontiguousarray(records).data)
            f.truncate(start + size)
        os.replace(tmp, path)
        _remove_others(path)
        log.info("wrote regrouped weight records %s (%.0f MB)", path, size / 1e6)
    except OSError as e:
        log.warning("could not write regrouped weight records %s: %s", path, e)
        tmp.unlink(missing_ok=True)


def _remove_others(path: Path) -> None:
    """The same GGUF's files of other keys, and temp files of writers that died."""
    model = glob.escape(path.name.rsplit("-", 1)[0] + "-")  # <gguf stem>-<file id>-
    for old in path.parent.glob(f"{model}*.x8"):
        if old != path:
            old.unlink(missing_ok=True)
    for tmp in path.parent.glob(f".{model}*.tmp"):
        pid = tmp.name.rsplit(".", 2)[-2]
        if pid.isdigit() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)          # signal 0: only asks whether the process exists (another user's counts)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _pages(nbytes: int) -> int:
    return -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE
