"""What an engine reports about itself: the EngineStats counters and the start-up description."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    kv_fragmentation: float
    preemptions_total: int
    prefix_cache_hit_tokens: int
    breaker_state: int = 0   # 0 closed, 1 half-open, 2 open (set by the async wrapper)
    spec_draft_tokens: int = 0      # speculative drafts verified since start (engine/speculation.py)
    spec_accepted_tokens: int = 0   # of which accepted
    spec_model_draft_tokens: int = 0      # of the drafts verified, those the draft model proposed (--draft-model)
    spec_model_accepted_tokens: int = 0   # of which accepted
    kv_blocks_committed: int | None = None   # blocks whose pages are committed so far (None: all)
    prompt_cache: dict[str, float] | None = None   # the tiers beyond the pool (PromptCache.metrics), None: off


def engine_stats(engine: Any) -> EngineStats:          # engine: an LLMEngine (engine.py)
    """The engine's counters now (engine thread, or between steps)."""
    a, scheduler, speculator = engine.allocator, engine.scheduler, engine.speculator
    return EngineStats(scheduler.num_running, scheduler.num_waiting, a.num_used_blocks, a.num_blocks,
                       a.fragmentation_rate(), scheduler.num_preemptions, a.prefix_cache_hits,
                       spec_draft_tokens=speculator.num_drafted,
                       spec_accepted_tokens=speculator.num_accepted,
                       spec_model_draft_tokens=speculator.num_model_drafted,
                       spec_model_accepted_tokens=speculator.num_model_accepted,
                       kv_blocks_committed=a.num_usable_blocks,
                       prompt_cache=engine.prompt_cache.metrics() if engine.prompt_cache is not None else None)


def describe_engine(engine: Any) -> str:                # engine: an LLMEngine
    """The engine's sizes and settings, in one paragraph for the start-up log."""
    config, budget = engine.config, engine.budget
    full = config.max_num_seqs * budget.blocks_for(engine.max_model_len) * budget.block_size
    text = (f"{budget.describe()}, KV dtype {config.kv_dtype} (max_num_seqs x max_model_len = "
            f"{full} tokens would need {(full * budget.bytes_per_token + budget.window_bytes) / 2**20:.0f} "
            "MiB); "
            f"max_model_len {engine.max_model_len}; dtype {config.dtype}; "
            f"max_num_seqs {config.max_num_seqs}; max_num_batched_tokens {config.max_num_batched_tokens}")
    if engine.speculator.draft is not None:
        text += f"\n{engine.speculator.draft.describe()}; drafts up to {config.draft_max_tokens} tokens"
    elif engine.draft is not None:
        text += "\ndraft model loaded but unused: speculation cannot run on this engine"
    plan = getattr(engine, "kernel_plan", None)   # set by engine.factory under dtype auto
    return f"{text}\n{plan.describe()}" if plan is not None else text
