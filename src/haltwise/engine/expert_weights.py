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
# where the memory controller's hierarchies are mounted: cgroup v2 (alone, or beside v1), then v1's
_V2_ROOTS, _V1_ROOT = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"), "/sys/fs/cgroup/memory"


def memory_limit() -> int:
    """Bytes this process may ever have resident: physical memory, or its cgroup's limit (its own or an
    ancestor's) when lower."""
    return min([os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), *cgroup_limits()])


def cgroup_limits(proc_cgroup: str = "/proc/self/cgroup", v2_roots: tuple[str, ...] = _V2_ROOTS,
                  v1_root: str = _V1_ROOT) -> list[int]:
    """The memory limits of this process's cgroup and its ancestors, v2 (memory.max) or v1
    (memory.limit_in_bytes); "max" and unreadable files are no limit."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            places = [(Path(root), "memory.max") for root in v2_roots]
        elif "memory" in controllers.split(","):
            places = [(Path(v1_root), "memory.limit_in_bytes")]
        else:
            continue
        for root, name in places:
            folder = root / path.lstrip("/")
            for d in (folder, *folder.parents):
                text = _read(d / name)
                if text.isdigit():
                    limits.append(int(text))
                if d == root:
                    break
    return limits


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


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
