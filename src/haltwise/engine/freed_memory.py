"""Memory a step frees stays with the process (glibc's malloc), so the next step's large tensors reuse its
pages instead of faulting in new ones.

glibc serves an allocation over its mmap threshold (at most 32 MiB) from a fresh anonymous map and unmaps
it when it is freed: every step's logits (Gemma 3 at 32 rows: 32 x 262144 floats, 33.5 MB) arrived as
~8,200 new zeroed pages, faulted in by whichever thread first wrote them (14% of a 32-row Gemma step's CPU
time in `perf`, most of it on the native pool's worker). With maps off (M_MMAP_MAX 0) and the heap's top
kept (M_TRIM_THRESHOLD), those tensors come from the heap and reuse what the last step freed: an
in-process greedy decode of 32 sequences ran 260 -> 346 tok/s (Gemma 3; Zen 4, 2 cores, medians of 3
alternating, same tokens). The cost: what a burst allocated (a long prefill's activations) stays resident
for the next one. The KV pool and the model file are maps of their own and are not affected.

Linux with glibc only; elsewhere (no `mallopt`) nothing changes.
"""
from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("haltwise.engine")

M_TRIM_THRESHOLD = -1    # glibc's malloc.h
M_MMAP_MAX = -4
KEPT_BYTES = 1 << 30     # free memory at the heap's top kept rather than returned to the system


def keep_freed_memory() -> bool:
    """Switch glibc's malloc to the heap for every size and stop it trimming; False where it cannot."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    kept = mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, KEPT_BYTES) == 1
    if not kept:
        log.warning("malloc options refused: a step's large tensors keep arriving as new pages")
    return kept
