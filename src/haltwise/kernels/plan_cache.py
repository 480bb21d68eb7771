"""Kernel plans cached as JSON, keyed by everything that can change a measurement's outcome.

Key: CPU model and ISA flags, torch version and CPU capability, intra-op threads, the model file's
identity (resolved path, size, mtime), the format registry's names and versions, whether the plan is
batch invariant, and the native extension's build digest (or why it failed to build). Any change
gives a new key, so a stale plan is never read; an unreadable or mismatched file is re-measured.
Location: $HALTWISE_CACHE_DIR/plans (default ~/.cache/haltwise/plans); HALTWISE_PLAN_CACHE=0 turns it off.
A plan file or plans directory that another user owns or others can write (cache_trust.py) is not read:
the plan is re-measured, with a warning; a directory of ours with open modes is closed (0700) first.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from haltwise.kernels.cache_trust import distrust, first_distrust
from haltwise.kernels.host import HostInfo
from haltwise.kernels.plan import KernelPlan

log = logging.getLogger("haltwise.kernels")
PLAN_VERSION = 3   # 3: batch-invariant plans; the key names the native build (model_plan.native_identity)


def model_identity(path: Path | None) -> str:
    """A file: path|size|mtime; a directory: the same for each of its files; None: 'in-memory'."""
    if path is None:
        return "in-memory"
    path = Path(path).resolve()
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    return ";".join(f"{p}|{p.stat().st_size}|{p.stat().st_mtime_ns}" for p in files)


def plan_key(host: HostInfo, model: str, registry: str, extra: str = "") -> str:
    flags = ",".join(sorted(host.flags))
    text = "|".join([str(PLAN_VERSION), host.cpu_model, host.machine, flags, host.torch_version,
                     host.torch_capability, str(host.threads), model, registry, extra])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def cache_dir() -> Path | None:
    if os.environ.get("HALTWISE_PLAN_CACHE", "1") == "0":
        return None
    return Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise")) / "plans"


def load(key: str) -> KernelPlan | None:
    root = cache_dir()
    path = root / f"{key}.json" if root else None
    if path is None or not path.is_file():
        return None
    reason = first_distrust(root, path)
    if reason is not None:
        log.warning("not using the cached kernel plan: %s; measuring again", reason)
        return None
    try:
        plan = KernelPlan.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("ignoring unreadable kernel plan %s: %s", path, e)
        return None
    return plan if plan.cache_key == key else None


def store(plan: KernelPlan) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    path = root / f"{plan.cache_key}.json"
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        if distrust(root) is not None and root.stat().st_uid == os.geteuid():
            root.chmod(0o700)                 # ours, but others could write it: close it before writing
        if (reason := distrust(root)) is not None:
            log.warning("not caching the kernel plan: %s", reason)
            return None
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(plan.to_json(), indent=1))
        tmp.replace(path)
    except OSError as e:
        log.warning("could not cache the kernel plan at %s: %s", path, e)
        return None
    return path
