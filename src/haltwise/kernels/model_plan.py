"""Plan a model's linears on this host (cached), and swap them for PlannedLinears."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from torch import nn

from haltwise.kernels import plan_cache
from haltwise.kernels.gguf_blocks import attach_gguf_blocks
from haltwise.kernels.formats import LinearFormat, all_formats, registry_version
from haltwise.kernels.host import HostInfo, probe
from haltwise.kernels.plan import KernelPlan, group_sources, measure_plan
from haltwise.kernels.planned_linear import apply_plan, linear_sources

log = logging.getLogger("haltwise.kernels")


def plan_model(model: nn.Module, model_path: Path | None, formats: list[LinearFormat] | None = None,
               host: HostInfo | None = None, use_cache: bool = True) -> tuple[KernelPlan, dict[str, int]]:
    """Measure (or read from the cache) the plan for every nn.Linear of `model`, then apply it.

    model_path identifies the weights for the cache (None: an in-memory model, keyed by its shapes only).
    Returns the plan and how many linears run each format.
    """
    host = host or probe()
    formats = all_formats() if formats is None else formats
    sources = list(linear_sources(model))
    if hasattr(model, "config"):  # raw GGUF blocks for the native formats (kernels/gguf_blocks.py)
        attach_gguf_blocks([s for _, _, s in sources], model_path, model.config)
    groups = group_sources(s for _, _, s in sources)
    shapes = hashlib.sha256(",".join(sorted(groups)).encode()).hexdigest()[:12]
    key = plan_cache.plan_key(host, plan_cache.model_identity(model_path), registry_version(formats), shapes)
    plan = plan_cache.load(key) if use_cache else None
    if plan is None or set(plan.groups) != set(groups):
        plan = measure_plan([s for _, _, s in sources], formats, host, cache_key=key)
        if plan.noisy:
            log.warning("the host was too busy to time %d kernel-plan cells (%s ...); this plan is used "
                        "but not cached, so the next start measures again", len(plan.noisy), plan.noisy[0])
        elif use_cache:
            plan_cache.store(plan)
    counts = apply_plan(model, plan, {f.name: f for f in formats}, sources)
    return plan, counts
