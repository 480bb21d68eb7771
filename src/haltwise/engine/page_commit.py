"""Zero tensors whose pages a background thread commits while the start goes on.

The KV pool is committed before the engine serves: a pool the host cannot hold fails at start, never in
the middle of a request. Committing 2-3 GB takes about a second here, and MAP_POPULATE does it inside
mmap() with the GIL held, so nothing else of the start could run meanwhile. A PageCommit maps each region
unpopulated instead (instant; an untouched page reads as zero whenever it is touched, so the tensors are
usable at once) and one thread asks the kernel to populate them with madvise(MADV_POPULATE_WRITE), called
through ctypes, which releases the GIL: the tokenizer and the kernel plan build on the other core
meanwhile. wait() returns once every page is committed, and raises MemoryError if the host refused one.
madvise holds the process's mmap lock while it populates, and every mmap/munmap of the other threads (numpy
and torch map each large array) waits for it: one call over a 2.3 GB pool stalled the kernel plan's ~0.3 s of
regrouping for 3-4 s here. The thread therefore populates COMMIT_CHUNK_BYTES per call (~0.5 ms each),
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
import threading

import torch

MADV_POPULATE_WRITE = 23     # linux/mman.h, since 5.14: fault every page in writable, as a write would
SMALL_BYTES = 2**20          # smaller regions come from torch.zeros (a map per tensor is not worth it)
COMMIT_CHUNK_BYTES = 2**20   # bytes per madvise call: the longest the mmap lock is held at a time


class PageCommit:
    """zeros() hands out tensors now; start() commits their pages in a thread; wait() joins it."""

    def __init__(self) -> None:
        self._regions: list[torch.Tensor] = []     # kept alive until committed
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None

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
        self._thread.start()

    def wait(self) -> None:
        """Block until the pages are committed (a no-op before start() or once done)."""
        if self._thread is not None:
            self._thread.join()
        self._regions.clear()
        if self._error is not None:
            raise MemoryError(f"the host could not commit the KV pool's pages: {self._error}") from self._error

    def _populate(self, regions: list[torch.Tensor]) -> None:
        for region in regions:
            address, nbytes = region.data_ptr(), region.numel() * region.element_size()
            for start in range(0, nbytes, COMMIT_CHUNK_BYTES):
                if _madvise(address + start, min(COMMIT_CHUNK_BYTES, nbytes - start), MADV_POPULATE_WRITE) != 0:
                    code = ctypes.get_errno()
                    self._error = OSError(code, os.strerror(code))
                    return


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

