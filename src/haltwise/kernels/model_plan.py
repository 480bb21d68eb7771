"""Plan a model's linears on this host (cached), swap them for PlannedLinears, and verify them here."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from haltwise.kernels import plan_cache
from haltwise.kernels.gguf_blocks import attach_gguf_blocks
from haltwise.kernels.formats import LinearFormat, all_formats, registry_version
from haltwise.kernels.host import HostInfo, probe
from haltwise.kernels.native import build
from haltwise.kernels.plan import (BUCKETS, FALLBACK, INVARIANT_FALLBACKS, KernelPlan, VerifyReport, group_sources,
                                   measure_plan)
from haltwise.kernels.planned_linear import PlannedLinear, apply_plan, linear_sources
from haltwise.kernels.record_cache import RecordCache, never
from haltwise.kernels.verify import verify_model

log = logging.getLogger("haltwise.kernels")


def native_identity() -> str:
    """The native extension's source/flags digest, or why it is missing: part of the plan-cache key, so a
    changed kernel is re-measured and a failed build never meets a plan that names native formats."""
    return f"native={build.build_key()}" if build.load() is not None else f"native-missing={build.failure()}"


def plan_model(model: nn.Module, model_path: Path | None, formats: list[LinearFormat] | None = None,
               host: HostInfo | None = None, use_cache: bool = True, batch_invariant: bool = False,
               calibrate: Callable[[nn.Module], dict[str, torch.Tensor]] | None = None,
               before_timing: Callable[[], None] | None = None,
               map_experts: bool = False) -> tuple[KernelPlan, dict[str, int]]:
    """Measure (or read from the cache) the plan for every nn.Linear of `model`, then apply it.

    model_path identifies the weights for the cache (None: an in-memory model, keyed by its shapes only).
    use_cache: read and write the plan cache, and a GGUF's regrouped records (kernels/record_cache.py).
    map_experts: the routed experts' blocks stay in files, mapped, never copied into memory: their records
    in the record file, blocks without records in the GGUF (engine/expert_weights.py decides).
    batch_invariant: one batch-invariant format per linear (the default path; kernels/plan.py).
    calibrate(model) -> {linear name: real input rows} (models/calibration.py), called once the plan is
    applied: every planned linear is verified on them (kernels/verify.py) and a failing one falls back.
    The verdict is cached with the plan, so a start that reads the plan from the cache applies the same
    fallbacks without calibrating or verifying again (the cache key names the native build, the host and
    the model file: what was verified is what runs). before_timing() is called before kernels are timed
    (only when the cache lacks the plan): whatever runs beside the start must be done by then.
    Returns the plan and how many linears run each format.
    """
    host = host or probe()
    formats = all_formats() if formats is None else formats
    sources = list(linear_sources(model))
    records = None
    if hasattr(model, "config"):  # raw GGUF blocks for the native formats (kernels/gguf_blocks.py)
        if attach_gguf_blocks([s for _, _, s in sources], model_path, model.config) and (use_cache or map_experts):
            records = RecordCache.for_model(Path(model_path), routed_expert if map_experts else never, use_cache)
            for _, _, source in sources:                             # their regrouped records (record_cache.py)
                source.records = records
    groups = group_sources(s for _, _, s in sources)
    shapes = hashlib.sha256(",".join(sorted(groups)).encode()).hexdigest()[:12]
    key = plan_cache.plan_key(host, plan_cache.model_identity(model_path), registry_version(formats),
                              f"{shapes}|invariant={batch_invariant}|{native_identity()}")
    plan = plan_cache.load(key) if use_cache else None
    if plan is None or set(plan.groups) != set(groups):
        if before_timing is not None:
            before_timing()
        plan = measure_plan([s for _, _, s in sources], formats, host, cache_key=key, batch_invariant=batch_invariant)
        if plan.noisy:
            log.warning("the host was too busy to time %d kernel-plan cells (%s ...); this plan is used "
                        "but not cached, so the next start measures again", len(plan.noisy), plan.noisy[0])
    by_name = {f.name: f for f in formats}
    counts = apply_plan(model, plan, by_name, sources)
    verified_now = calibrate is not None and plan.verified is None
    if verified_now:
        plan.verified = verify(model, sources, calibrate(model), by_name, batch_invariant)
        counts = format_counts(model)
    elif plan.verified is not None and plan.verified.failures:
        for name in plan.verified.failures:                 # the cached verdict: the same fallbacks
            _fall_back(sources, name, by_name, batch_invariant)
        counts = format_counts(model)
    for _, _, source in sources:
        source.release()
        source.records = None
    if records is not None:
        records.save()
    if use_cache and not plan.noisy and (verified_now or not plan.from_cache):
        plan_cache.store(plan)
    return plan, counts


def routed_expert(name: str) -> bool:
    """Whether a linear (or record entry: "<linear>#<run>") belongs to a routed expert
    ("model.layers.3.mlp.experts.17.down_proj"); a shared expert is not routed: every token reads it."""
    return ".mlp.experts." in name


def verify(model: nn.Module, sources, captured, formats: dict[str, LinearFormat], batch_invariant: bool,
           max_rows: int = BUCKETS[-1]) -> VerifyReport:
    """verify_model over the applied plan; a failing linear is re-planned onto the fallback formats."""
    by_name = {source.name: source for _, _, source in sources}
    report = verify_model(model, by_name, captured,
                          lambda name: _fall_back(sources, name, formats, batch_invariant), max_rows)
    log.info("kernel plan verified: %d (linear, row bucket) cells on real activations, worst error %.2f of "
             "its bound, %d linears fell back", report.checked, report.worst, len(report.failures))
    return report


def _fall_back(sources, name: str, formats: dict[str, LinearFormat], batch_invariant: bool) -> str:
    """Re-plan linear `name` onto the fallback formats for every bucket; returns the format it now runs."""
    fallbacks = [n for n in (*(INVARIANT_FALLBACKS if batch_invariant else ()), FALLBACK) if n in formats]
    parent, attr, source = next(s for s in sources if s[2].name == name)
    layer = PlannedLinear(source, [fallbacks] * len(BUCKETS), formats)
    setattr(parent, attr, layer)
    return layer.bucket_formats[0]


def format_counts(model: nn.Module) -> dict[str, int]:
    """How many linears run each format anywhere, e.g. {'gguf-q8-native': 121}."""
    counts: dict[str, int] = {}
    for module in model.modules():
        if isinstance(module, PlannedLinear):
            for name in set(module.bucket_formats):
                counts[name] = counts.get(name, 0) + 1
    return counts
