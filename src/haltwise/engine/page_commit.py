"""Zero tensors whose pages a background thread commits while the start goes on, and after it.

The KV pool is committed before its blocks are used: a pool the host cannot hold fails at start, or
shrinks to what the host gave (engine.py), never in the middle of a request. Committing 2-3 GB takes
1-3 s here, and MAP_POPULATE does it inside mmap() with the GIL held, so nothing else of the start could
run meanwhile. A PageCommit maps each region unpopulated instead (instant; an untouched page reads as zero
whenever it is touched, so the tensors are usable at once) and one thread asks the kernel to populate
them with madvise(MADV_POPULATE_WRITE), called through ctypes, which releases the GIL.

Regions are committed row by row (a KV cache's row is one block), in rounds: round r commits rows
[r R, (r + 1) R) of every region that has them, so `committed_rows` (every region's rows below it are
committed) grows from the first ~50 ms on. wait(rows) returns once that many rows are committed, wait()
once every page is; either raises MemoryError if the host refused a page the caller waits for. The
engine serves as soon as the blocks for one longest sequence are committed and takes the rest as they
come (engine.py).

Once an engine serves from the pool, the thread is paced (pace()): it commits a round only while the
engine lets it (engine/pool_growth.py: while idle, or short of free committed blocks), since
the kernel's page clearing and the mmap lock slow the steps beside it (a 32-sequence Gemma decode ran
~10-20% slower while a 2.5 GB pool committed under it).

madvise holds the process's mmap lock while it populates, and every mmap/munmap of the other threads
(numpy and torch map each large array) waits for it: one call over a 2.3 GB pool stalled the kernel
plan's ~0.3 s of regrouping for 3-4 s here. A call therefore covers about COMMIT_CHUNK_BYTES (~0.5 ms),
so another thread's map waits at most one chunk.

Where madvise cannot populate (Linux before 5.14) each region is populated as it is mapped (MAP_POPULATE);
without anonymous maps, or under SMALL_BYTES, torch.zeros. Either way a page arrives zeroed from the kernel
and is written once, where torch.zeros faults each page in (zeroed) and writes the zeros again (~40% of a
2.3 GB pool's start time here).
"""
from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
import sys
import threading
import time
from collections.abc import Callable

import torch

MADV_POPULATE_WRITE = 23     # linux/mman.h, since 5.14: fault every page in writable, as a write would
SMALL_BYTES = 2**20          # smaller regions come from torch.zeros (a map per tensor is not worth it)
COMMIT_CHUNK_BYTES = 2**20   # bytes per madvise call: the longest the mmap lock is held at a time
PACE_POLL_S = 0.05           # a paced thread asks again this often while it may not go on
EVERY_ROW = sys.maxsize      # committed_rows once done without error: no row of any region is left


class PageCommit:
    """zeros() hands out tensors now; start() commits their pages in a thread; wait() waits for them."""

    def __init__(self) -> None:
        self._regions: list[torch.Tensor] = []     # kept alive until committed
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None
        self._progress = threading.Condition()
        self.committed_rows = 0                    # rows below this are committed in every region (EVERY_ROW:
                                                   # done, including regions that never needed a commit)
        self.finished = False                      # the thread is done: every page committed, or error set
        self._may_go_on: Callable[[], bool] | None = None

    @property
    def error(self) -> OSError | None:
        """Why the host refused a page (rows from committed_rows on were not committed), or None."""
        return self._error

    def zeros(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A contiguous zero tensor of `shape`; past SMALL_BYTES it is an anonymous map that start() commits."""
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if nbytes < SMALL_BYTES or not hasattr(mmap, "MAP_ANONYMOUS"):
            return torch.zeros(shape, dtype=dtype)
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        if not can_populate_later():
            flags |= getattr(mmap, "MAP_POPULATE", 0)
        pages = mmap.mmap(-1, nbytes, flags=flags)
        tensor = torch.frombuffer(pages, dtype=dtype).view(shape)     # the tensor keeps the map alive
        if can_populate_later():
            self._regions.append(tensor)
        return tensor

    def start(self) -> None:
        """Commit the pages of every region zeros() has mapped so far, in a daemon thread."""
        assert self._thread is None, "start() once"
        self._thread = threading.Thread(target=self._populate, args=(list(self._regions),),
                                        name="haltwise-page-commit", daemon=True)
        self._regions.clear()
        self._thread.start()

    def pace(self, may_go_on: Callable[[], bool] | None) -> None:
        """From now on a round is committed only once may_go_on() (asked by the thread before each round,
        then every PACE_POLL_S until true) says so; None: no pacing."""
        self._may_go_on = may_go_on

    def wait(self, rows: int | None = None) -> None:
        """Block until `rows` rows (None: every page) are committed; a no-op before start() or once done."""
        if self._thread is None:
            return
        with self._progress:
            self._progress.wait_for(lambda: self.finished or (rows is not None and self.committed_rows >= rows))
        if self._error is not None and (rows is None or self.committed_rows < rows):
            raise MemoryError(f"the host could not commit the KV pool's pages: {self._error}") from self._error

    def _populate(self, regions: list[torch.Tensor]) -> None:
        spans = [_RowSpan(region) for region in regions]
        most = max((span.rows for span in spans), default=0)
        per_round = max(1, COMMIT_CHUNK_BYTES // max((span.row_bytes for span in spans), default=1))
        try:
            for end in range(per_round, most + per_round, per_round):
                while (may_go_on := self._may_go_on) is not None and not may_go_on():
                    time.sleep(PACE_POLL_S)
                for span in spans:
                    span.commit_to(min(end, span.rows))
                self._publish(min(end, most))
            self._publish(EVERY_ROW)    # a pool of small regions (or none mapped here) has no rows to count
        except OSError as e:
            self._error = e
        finally:
            with self._progress:
                self.finished = True
                self._progress.notify_all()

    def _publish(self, rows: int) -> None:
        with self._progress:
            self.committed_rows = rows
            self._progress.notify_all()


class _RowSpan:
    """One region's pages, committed up to the page that holds the end of a given row."""

    def __init__(self, region: torch.Tensor):
        self.address, self.nbytes = region.data_ptr(), region.numel() * region.element_size()
        self.rows = region.shape[0] if region.dim() else 1
        self.row_bytes = self.nbytes // max(1, self.rows)
        self.done = 0                                # bytes committed from the start (a page multiple, or all)

    def commit_to(self, row: int) -> None:
        end = min(self.nbytes, -(-row * self.row_bytes // mmap.PAGESIZE) * mmap.PAGESIZE)
        if end <= self.done:
            return
        if _madvise(self.address + self.done, end - self.done, MADV_POPULATE_WRITE) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self.done = end


def committed_zeros(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A zero tensor whose pages are committed on return (a PageCommit of one region, waited for)."""
    commit = PageCommit()
    tensor = commit.zeros(shape, dtype)
    commit.start()
    commit.wait()
    return tensor


@functools.cache
def can_populate_later() -> bool:
    """madvise(MADV_POPULATE_WRITE) works here (tried once on one page of a fresh map)."""
    if not hasattr(mmap, "MAP_ANONYMOUS"):
        return False
    page = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    try:
        return _madvise(address, mmap.PAGESIZE, MADV_POPULATE_WRITE) == 0
    except (AttributeError, OSError):
        return False


def _madvise(address: int, length: int, advice: int) -> int:
    """libc madvise through ctypes (the GIL is released for the call); 0 or -1 with errno set."""
    return _libc_madvise()(ctypes.c_void_p(address), ctypes.c_size_t(length), ctypes.c_int(advice))


@functools.cache
def _libc_madvise():
    libc = ctypes.CDLL(None, use_errno=True)
    fn = libc.madvise
    fn.argtypes, fn.restype = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int
    return fn

