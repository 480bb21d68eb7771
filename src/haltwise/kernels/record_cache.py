"""Regrouped weight records kept on disk between starts, so a second start regroups nothing (issue 25), and the
experts of a mixture-of-experts model too large for the memory kept in that file, not in memory (issue 47).

Every GGUF linear that runs natively is regrouped 8 rows at a time (native/repack.py) when it is
prepared: Qwen2.5-Coder-0.5B's 485 MB of blocks cost ~1.2 s of CPU on the start's two cores, beside the
imports and the tokenizer, plus the first touch of 485 MB of fresh memory. The first start writes the
records its plan runs to one file per model (kernels/record_file.py); later starts read its entries into
anonymous memory (huge pages where offered: the kernels stream them faster than a map of the page cache,
_anonymous) and hand slices of it to the kernels: no regrouping.

    $HALTWISE_CACHE_DIR/records/<gguf stem>-<file id>-<key>.x8     (layout: record_file.py)

Mapped entries (`mapped(name)` true: the routed experts when the engine maps them, engine/expert_weights.py)
are regrouped straight into their place in the file and used from it (a map), on the first start and every
later one: only the pages of experts that tokens touch are resident, and the kernel drops them under memory
pressure and reads them back. With the cache off (HALTWISE_RECORD_CACHE=0) they go to an unnamed
file in the same folder, gone when the process ends. Like a mapped GGUF, a file truncated under a running
server makes its mapped entries unreadable (SIGBUS): haltwise itself only ever replaces it (rename).

key: the GGUF's resolved path, size and mtime (a changed file is a miss, never a stale hit) and a digest
of the regrouping's code (repack.cpp, repack.py): a changed layout is a miss too. An entry is used only
if its `source` (qtypes and shapes of the shards it was made from) equals the asking linear's. A file
that is not ours or is writable by others (cache_trust.py), or that does not parse, is not used (logged).
The file is finished after the plan is applied, by a background thread (temp file + rename); it replaces
the model's older files (other keys, same GGUF). Models under MIN_CACHED_BYTES of records with nothing
mapped are not cached (they regroup in milliseconds). HALTWISE_RECORD_CACHE=0 turns reuse off.
"""
from __future__ import annotations

import glob
import hashlib
import logging
import mmap
import os
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from haltwise.errors import ModelLoadError
from haltwise.kernels.cache_trust import first_distrust
from haltwise.kernels.record_file import RecordWriter, page_round, read_entries

log = logging.getLogger("haltwise.kernels")

MIN_CACHED_BYTES = 16 * 2**20
_CODE_FILES = (Path(__file__).parent / "native" / "csrc" / "repack.cpp", Path(__file__).parent / "native" / "repack.py")


def never(name: str) -> bool:
    return False


class RecordCache:
    """get(name, source) -> (records, code) or None; put(...) what was made in memory, make(...) a mapped
    entry in the file; save() finishes the file if anything was made. Thread-safe: a plan prepares its
    linears on several threads. mapped(name): whether entry `name` lives in the file rather than in memory."""

    def __init__(self, path: Path | None, mapped: Callable[[str], bool] = never):
        self.path = path                                    # None: nothing is read or kept after the process
        self.mapped = mapped
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[str, int, np.ndarray]] = {}   # name -> (source, code, records)
        self._used: set[str] = set()
        self._added = False
        self._writer: RecordWriter | None = None            # where mapped entries made here were written
        self.hits = 0
        if path is not None and path.is_file():
            self._entries = _read(path, mapped)

    @classmethod
    def for_model(cls, gguf: Path, mapped: Callable[[str], bool] = never, reuse: bool = True) -> "RecordCache":
        """The cache of a GGUF file (reuse False or HALTWISE_RECORD_CACHE=0: nothing read or kept)."""
        if not reuse or os.environ.get("HALTWISE_RECORD_CACHE", "1") == "0":
            return cls(None, mapped)
        st = gguf.stat()
        resolved = str(gguf.resolve())
        code = hashlib.sha256(b"".join(p.read_bytes() for p in _CODE_FILES)).hexdigest()
        key = hashlib.sha256(f"{resolved}|{st.st_size}|{st.st_mtime_ns}|{code}".encode()).hexdigest()[:16]
        file_id = hashlib.sha256(resolved.encode()).hexdigest()[:8]
        return cls(_root() / f"{gguf.stem}-{file_id}-{key}.x8", mapped)

    def get(self, name: str, source: str) -> tuple[np.ndarray, int] | None:
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry[0] != source:
                return None
            self._used.add(name)
            self.hits += 1
            return entry[2], entry[1]

    def put(self, name: str, source: str, records: np.ndarray, code: int) -> None:
        """Keep records made in memory (written to the file by save())."""
        with self._lock:
            self._entries[name] = (source, code, records)
            self._used.add(name)
            self._added = True

    def make(self, name: str, source: str, shape: tuple[int, int], code: int,
             fill: Callable[[np.ndarray], object]) -> np.ndarray:
        """A mapped entry: `fill` writes the records straight into their place in the file (nothing passes
        through the process's memory), and their view of the file is returned. ModelLoadError when the file
        cannot be written (a full disk)."""
        try:
            with self._lock:
                if self._writer is None:
                    self._writer = RecordWriter(self.path, _root())
                writer = self._writer
            records = writer.reserve(name, source, code, shape)
        except OSError as e:
            raise ModelLoadError(f"could not write the experts' regrouped weight records to {_root()} ({e}): "
                                 "free space there, or start with --expert-weights resident") from e
        fill(records)
        self.put(name, source, records, code)
        return records

    def save(self) -> threading.Thread | None:
        """Finish the file with every entry used since opening, in a daemon thread, if any was made here
        (else None)."""
        with self._lock:
            if self.path is None or not self._added:
                return None
            used = {name: self._entries[name] for name in sorted(self._used)}
            writer, self._writer = self._writer, None
            self._added = False
        if writer is None and sum(records.nbytes for _, _, records in used.values()) < MIN_CACHED_BYTES:
            return None
        thread = threading.Thread(target=_write, args=(self.path, used, writer), name="haltwise-record-cache",
                                  daemon=True)
        thread.start()
        return thread


def _root() -> Path:
    return Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise")) / "records"


def _read(path: Path, mapped: Callable[[str], bool]) -> dict[str, tuple[str, int, np.ndarray]]:
    """The entries of a cache file: mapped ones as views of a read-only map of it, the others copied into one
    anonymous region (_anonymous); {} (logged) for a file not to be used."""
    why = first_distrust(path.parent, path)
    if why is not None:
        log.warning("not using regrouped weight records %s: %s", path, why)
        return {}
    try:
        with open(path, "rb") as f:
            whole = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            entries = read_entries(whole)
            resident = [name for name in entries if not mapped(name)]
            copy = _anonymous(sum(page_round(entries[n].rows * entries[n].width) for n in resident))
            out, at = {}, 0
            for name, e in entries.items():
                nbytes = e.rows * e.width
                if name in resident:
                    _read_into(f, memoryview(copy)[at:at + nbytes], e.offset)
                    view = np.frombuffer(copy, np.uint8, nbytes, at)
                    at += page_round(nbytes)
                else:
                    view = np.frombuffer(whole, np.uint8, nbytes, e.offset)
                out[name] = (e.source, e.code, view.reshape(e.rows, e.width))
            return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring regrouped weight records %s: %s", path, e)
        return {}


def _read_into(f, target: memoryview, offset: int) -> None:
    done = 0
    while done < len(target):
        n = os.preadv(f.fileno(), [target[done:]], offset + done)
        if not n:
            raise ValueError("the file ended early")
        done += n
    target.release()


def _anonymous(size: int) -> mmap.mmap:
    """Private anonymous memory for the resident entries, asked for transparent huge pages where the kernel
    offers them (HALTWISE_RECORD_HUGE=0: not asked). Not the file's own pages: a decode step streams every
    record once, and on the 1.5B a greedy decode ran 15.5 tok/s from a map of the page cache, 17.7 from
    anonymous 4K pages, 19.4 from huge pages (medians of 6, alternating: docs/benchmarks.md). The cost: a
    later start reads the file (~1 GB: 0.3-0.5 s, plus 1-2.5 s where the kernel must compact memory for huge
    pages), and servers no longer share the file's page-cache pages."""
    data = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE") and os.environ.get("HALTWISE_RECORD_HUGE", "1") != "0":
        try:
            data.madvise(mmap.MADV_HUGEPAGE)
        except OSError:                         # a kernel without THP: 4K pages, still anonymous
            pass
    return data


def _write(path: Path, entries: dict[str, tuple[str, int, np.ndarray]], writer: RecordWriter | None) -> None:
    """Add the entries not yet in the file (every one when no writer was started), then finish it."""
    try:
        writer = writer or RecordWriter(path, _root())
        for name, (source, code, records) in entries.items():
            if name not in writer.entries:
                writer.add(name, source, code, records)
        writer.finish()
        _remove_others(path)
        log.info("wrote regrouped weight records %s (%.0f MB)", path, os.path.getsize(path) / 1e6)
    except OSError as e:
        log.warning("could not write regrouped weight records %s: %s", path, e)
        if writer is not None:
            writer.abandon()


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
