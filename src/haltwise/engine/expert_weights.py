"""Where a mixture-of-experts model's routed experts live: in memory, or in files mapped on demand (issue 47).

`--expert-weights` (EngineConfig.expert_weights):

    resident  every expert's regrouped records in anonymous memory (huge pages where offered): the fastest
              reads, but the whole model is resident beside the KV pool (a copy about the GGUF's size).
    mapped    the experts' records written once to the model's record file (kernels/record_cache.py) and
              mapped from it (MXFP4 blocks, which have no records, from the GGUF itself): only the experts
              tokens touch are resident, and the kernel drops them under memory pressure and reads them back,
              so a model larger than the memory starts and runs (experts not resident at the disk's speed).
              The first start writes about the experts' size to the cache folder (a full disk: a clear error).
    auto      (default) mapped when the GGUF is larger than half the memory limit (`memory_limit`: MemTotal,
              or the cgroup's limit when lower), else resident -- as llama.cpp maps a model by default.

The two give the same bits (the same records, the same kernels, row by row), and the limit does not change
between restarts, so neither does the choice. Dense models have no routed experts: nothing changes for them.
"""
from __future__ import annotations

import os
from pathlib import Path

EXPERT_WEIGHTS = ("auto", "mapped", "resident")
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_limit() -> int:
    """Bytes this process may ever have resident: physical memory, or its cgroup's limit when lower."""
    limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for name in _CGROUP_LIMITS:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        if text.isdigit():                       # "max" (v2) or a huge number (v1) when unlimited
            limit = min(limit, int(text))
    return limit


def maps_experts(setting: str, model_path: Path | None, limit: int | None = None) -> bool:
    """Whether the routed experts of the model at `model_path` stay in mapped files (module docstring).
    Only GGUF files have raw blocks to map; `limit`: memory_limit() unless given."""
    if setting not in EXPERT_WEIGHTS:
        raise ValueError(f"expert_weights must be one of {list(EXPERT_WEIGHTS)}, got {setting!r}")
    if model_path is None or Path(model_path).suffix != ".gguf" or setting == "resident":
        return False
    if setting == "mapped":
        return True
    return Path(model_path).stat().st_size > (memory_limit() if limit is None else limit) // 2


def expert_bytes(model_path: Path) -> int:
    """Bytes of a GGUF's routed-expert tensors (`blk.N.ffn_{gate,up,down,gate_up}_exps`)."""
    from haltwise.gguf.reader import open_gguf

    return sum(t.n_bytes for t in open_gguf(model_path).tensors if "_exps." in t.name)
