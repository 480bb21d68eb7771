"""The disk tier: one file per block (entry_file.py) in a directory of ours, LRU by access within a byte budget.

Writes go through a bounded queue to one background thread: save() never blocks (a full queue drops the
write and counts it), so decoding is never delayed by the disk. Reads (load) run on the caller's thread.

Crash safety: an entry is written to a temp file `.<name>.<pid>.tmp`, fsynced, then renamed into place, so a
kill -9 at any moment leaves either no entry or a whole one; temp files of dead processes are removed at
start. Every entry carries a checksum over its key and bytes, checked on every load: a corrupt, truncated or
foreign entry is removed, counted (stats.corrupt_skipped) and logged, never loaded.

Trust (kernels/cache_trust.py): the directory must be ours and not writable by group or others, else
UntrustedCacheDir at start; a file in it that is not ours or is group/other-writable is removed unread.

Budget: the index is rebuilt from the files at start (oldest access first, by mtime: a hit touches its file,
since atime is often not kept); room for a new entry is made by removing the least recently used files
before its temp file is written, so the directory's entries never sum to more than budget_bytes.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from pathlib import Path

from haltwise.engine.prompt_cache import entry_file
from haltwise.engine.prompt_cache.entry_file import BadEntry
from haltwise.engine.prompt_cache.tier_stats import TierStats
from haltwise.kernels.cache_trust import distrust

log = logging.getLogger("haltwise.prompt_cache")
Key = tuple[bytes, bytes]     # (namespace, chain hash)
WRITE_QUEUE_BLOCKS = 256      # blocks waiting for the writer at most (~50 MiB of SmolLM2 int8 blocks)


class UntrustedCacheDir(ValueError):
    """The directory is not ours, or others can write it."""


class DiskTier:
    name = "disk"

    def __init__(self, root: str | Path, budget_bytes: int, queue_blocks: int = WRITE_QUEUE_BLOCKS):
        self.root = Path(root)
        self._budget = budget_bytes
        self.stats = TierStats()
        self._index: OrderedDict[Key, tuple[str, int]] = OrderedDict()   # key -> (file name, size), LRU first
        self._pending: set[Key] = set()
        self._used = 0
        self._lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, queue_blocks))
        self.check_root(self.root)
        self._rebuild()
        self._writer = threading.Thread(target=self._write_loop, name="haltwise-prompt-cache-writer", daemon=True)
        self._writer.start()

    @staticmethod
    def check_root(root: Path) -> None:
        """Create root (0700) if absent; UntrustedCacheDir if it is not ours or others can write it."""
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if (reason := distrust(root)) is not None:
            raise UntrustedCacheDir(f"prompt cache directory refused: {reason}")

    @property
    def budget_bytes(self) -> int:
        return self._budget

    @property
    def used_bytes(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._index)

    # ---- start --------------------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        found = []
        for path in self.root.iterdir():
            if path.name.endswith(".tmp"):
                self._remove_stale_temp(path)
                continue
            if not path.name.endswith(entry_file.SUFFIX):
                continue
            if (reason := distrust(path)) is not None:
                self._discard(path, f"untrusted ({reason})", untrusted=True)
                continue
            try:
                st = path.stat()
                with open(path, "rb") as f:
                    ns, chain, _ = entry_file.read_header(f.read(entry_file.HEADER_BYTES), path.name, st.st_size)
            except BadEntry as e:
                self._discard(path, str(e))
                continue
            except OSError:
                continue
            found.append((st.st_mtime_ns, (ns, chain), path.name, st.st_size))
        for _, key, name, size in sorted(found):
            self._index[key] = (name, size)
            self._used += size
        while self._used > self._budget and self._index:   # a smaller budget than last time
            self._evict_oldest()
        log.info("prompt cache: %d entries, %.1f MiB on disk in %s (budget %.1f MiB)", len(self._index),
                 self._used / 2**20, self.root, self._budget / 2**20)

    def _remove_stale_temp(self, path: Path) -> None:
        try:
            pid = int(path.name.rsplit(".", 2)[-2])
            if pid != os.getpid():
                os.kill(pid, 0)
                return      # a live process is writing it
        except (ValueError, IndexError, ProcessLookupError):
            pass
        except PermissionError:
            return
        path.unlink(missing_ok=True)

    def _discard(self, path: Path, why: str, untrusted: bool = False) -> None:
        log.warning("prompt cache: removing entry %s: %s", path, why)
        if untrusted:
            self.stats.untrusted_skipped += 1
        else:
            self.stats.corrupt_skipped += 1
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass

    # ---- lookups ------------------------------------------------------------------------------------------
    def contains(self, key: Key) -> bool:
        with self._lock:
            return key in self._index

    def load(self, key: Key) -> bytes | None:
        """The checked payload (its entry now most recently used), or None: absent, unreadable or bad (removed)."""
        with self._lock:
            entry = self._index.get(key)
        if entry is None:
            return None
        path = self.root / entry[0]
        try:
            if (reason := distrust(path)) is not None:
                self._forget(key, path, f"untrusted ({reason})", untrusted=True)
                return None
            payload = entry_file.decode(path.read_bytes(), key[0], key[1], entry[0])
            os.utime(path)
        except BadEntry as e:
            self._forget(key, path, str(e))
            return None
        except OSError:
            with self._lock:
                self._drop_index(key)
            return None
        with self._lock:
            if key in self._index:
                self._index.move_to_end(key)
        return payload

    def _forget(self, key: Key, path: Path, why: str, untrusted: bool = False) -> None:
        with self._lock:
            self._drop_index(key)
        self._discard(path, why, untrusted)

    def _drop_index(self, key: Key) -> None:
        entry = self._index.pop(key, None)
        if entry is not None:
            self._used -= entry[1]

    # ---- writes -------------------------------------------------------------------------------------------
    def wants(self, key: Key) -> bool:
        """Whether save(key, ...) would queue a write now (callers skip copying the bytes otherwise)."""
        with self._lock:
            return key not in self._index and key not in self._pending

    def save(self, key: Key, payload: bytes) -> bool:
        """Queue a write without blocking; False (counted as a write drop) when the queue is full."""
        with self._lock:
            if key in self._index or key in self._pending:
                return True
            try:
                self._queue.put_nowait((key, payload))
            except queue.Full:
                self.stats.write_drops += 1
                return False
            self._pending.add(key)
        return True

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued write is done (tests, shutdown)."""
        self._queue.join() if timeout is None else _join(self._queue, timeout)

    def _write_loop(self) -> None:
        while True:
            key, payload = self._queue.get()
            try:
                self._write(key, payload)
            except Exception as e:   # never let the writer die: count the drop
                log.warning("prompt cache: write failed: %s", e)
                self.stats.write_drops += 1
            finally:
                with self._lock:
                    self._pending.discard(key)
                self._queue.task_done()

    def _write(self, key: Key, payload: bytes) -> None:
        data = entry_file.encode(key[0], key[1], payload)
        name = entry_file.entry_name(*key)
        with self._lock:
            if len(data) > self._budget:
                self.stats.write_drops += 1
                return
            while self._used + len(data) > self._budget and self._index:
                self._evict_oldest()
            self._used += len(data)          # reserved before the temp file exists: the budget always holds
        tmp = self.root / f".{name}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.root / name)
        except OSError:
            tmp.unlink(missing_ok=True)
            with self._lock:
                self._used -= len(data)
            raise
        with self._lock:
            self._index[key] = (name, len(data))
            self.stats.saved_bytes += len(payload)

    def _evict_oldest(self) -> None:
        """Remove the least recently used entry (lock held)."""
        key, (name, size) = self._index.popitem(last=False)
        self._used -= size
        self.stats.evictions += 1
        try:
            (self.root / name).unlink(missing_ok=True)
        except OSError:
            pass


def _join(q: queue.Queue, timeout: float) -> None:
    end = time.monotonic() + timeout
    while q.unfinished_tasks and time.monotonic() < end:
        time.sleep(0.01)
