"""Restored from RAM or disk -> the same tokens as a fresh prefill, on the default path of each family.

An engine with a pool of a few prompts runs a prompt P (a fresh prefill: the reference), then other prompts
that evict P's blocks from the pool into the RAM tier, then P again (restored from RAM); a new engine on the
same directory with no RAM tier runs P (restored from disk). Greedy and seeded sampling, int8 KV (the
default) and float32 KV. Gemma 3 keeps its sliding layers' window in a pool of its own by default, where the
prefix cache (and so this cache) is off: its answers stay the same and nothing is restored; with --swa-full
the cache is on and restores exactly.
"""
from __future__ import annotations

import random

import pytest

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.engine.prompt_cache import DiskTier, PromptTiers, RamTier
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.engine.window_blocks import window_pool_blocks
from haltwise.tools.model_args import read_model_config
from tests.engine.test_determinism_real import default_config
from tests.models.real_models import real_model_path

NO_LOOPS = RepetitionDetection(enabled=False)
PARAMS = [SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, repetition_detection=NO_LOOPS),
          SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=12, ignore_eos=True,
                         repetition_detection=NO_LOOPS)]
PROMPT_BLOCKS = 20


def run(engine, prompt, params, rid):
    engine.add_request(rid, prompt, params)
    final = None
    while engine.has_unfinished():
        for u in engine.step():
            if u.finished:
                final = u
    return final


def prompts(vocab: int, n: int, length: int) -> list[list[int]]:
    rng = random.Random(1)
    return [[rng.randrange(3, vocab) for _ in range(length)] for _ in range(n)]


def check_restores(build, tmp_path, prompt_len: int, others: list[list[int]], target: list[int]):
    """build(tiers) -> engine. Asserts RAM and disk restores give the fresh prefill's tokens (two engine builds:
    a real model's build plans and verifies its kernels, minutes on a busy host)."""
    disk = DiskTier(tmp_path / "pc", 1 << 30)
    engine = build(PromptTiers(RamTier(1 << 30), disk))
    fresh = {}
    for i, params in enumerate(PARAMS):
        fresh[i] = run(engine, target, params, f"fresh{i}")
        assert fresh[i].num_cached_tokens == 0 or i > 0
        for j, other in enumerate(others):
            run(engine, other, params, f"other{i}.{j}")
        again = run(engine, target, params, f"again{i}")
        assert again.cached_by_tier["ram"] > 0, again.cached_by_tier
        assert again.outputs[0].token_ids == fresh[i].outputs[0].token_ids, f"restored from RAM differs ({params})"
    stats = engine.stats().prompt_cache
    assert stats["ram_hit_blocks"] > 0 and stats["disk_saved_bytes"] > 0
    disk.flush()
    del engine
    restarted = build(PromptTiers(None, DiskTier(tmp_path / "pc", 1 << 30)))
    for i, params in enumerate(PARAMS):
        cold = run(restarted, target, params, f"disk{i}")
        assert cold.cached_by_tier["disk"] == (prompt_len - 1) // 16 * 16, cold.cached_by_tier
        assert cold.outputs[0].token_ids == fresh[i].outputs[0].token_ids, f"restored from disk differs ({params})"
        restarted.allocator.reset_prefix_cache()     # the next params restore from disk again
    assert restarted.stats().prompt_cache["disk_hit_blocks"] > 0


def test_tiny_float32_restores_exactly(tmp_path):
    """The tiny random Llama on plain float32 (no plan): a prefix restored is the prefix computed."""
    cfg = EngineConfig(kv_cache_memory=3 * PROMPT_BLOCKS * 16 * 512, max_model_len=512)
    build = lambda tiers: build_engine(tiny=True, engine_config=cfg, prompt_tiers=tiers)   # noqa: E731
    target, *others = prompts(512, 3, PROMPT_BLOCKS * 16 + 5)
    check_restores(build, tmp_path, len(target), others, target)


def _real(name: str, *flags: str, max_len: int = 512):
    model = None if name == "smollm2-135m" else str(real_model_path(name))
    config = read_model_config(model)[1]
    kv_dtype = default_config(*flags).kv_dtype
    pool = 3 * PROMPT_BLOCKS * 16 * config.kv_bytes_per_token(kv_dtype)
    if config.num_sliding_layers and "--swa-full" not in flags:      # the sliding layers' own pool comes first
        pool += window_pool_blocks(config, default_config(*flags), max_len) * 16 * config.kv_bytes_per_token(
            kv_dtype, config.num_sliding_layers)
    vocab = config.vocab_size
    cfg = default_config("--kv-cache-memory", str(pool), "--max-model-len", str(max_len), *flags)
    return (lambda tiers: build_engine(model, cfg, prompt_tiers=tiers)), vocab


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name,flags", [("smollm2-135m", ()), ("smollm2-135m", ("--kv-cache-dtype", "float32")),
                                        ("gemma3-270m", ("--swa-full",))])
def test_real_default_path_restores_exactly(tmp_path, name, flags):
    build, vocab = _real(name, *flags)
    target, *others = prompts(min(vocab, 30000), 3, PROMPT_BLOCKS * 16 + 5)
    check_restores(build, tmp_path, len(target), others, target)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_gemma3_window_pool_keeps_the_cache_off_and_answers_unchanged(tmp_path):
    # longer than the 512-token window, one sequence at a time: the sliding layers' own pool pays (KVBudget)
    build, vocab = _real("gemma3-270m", "--max-num-seqs", "1", max_len=2048)
    target, *others = prompts(min(vocab, 30000), 3, PROMPT_BLOCKS * 16 + 5)
    engine = build(PromptTiers(RamTier(1 << 30), DiskTier(tmp_path / "pc", 1 << 30)))
    assert engine.prompt_cache is None and engine.budget.window_blocks > 0
    fresh = run(engine, target, PARAMS[0], "a")
    for j, other in enumerate(others):
        run(engine, other, PARAMS[0], f"o{j}")
    again = run(engine, target, PARAMS[0], "b")
    assert again.num_cached_tokens == 0 and again.outputs[0].token_ids == fresh.outputs[0].token_ids


def test_a_different_kv_dtype_or_block_size_on_the_same_directory_is_a_miss(tmp_path):
    target = prompts(512, 1, PROMPT_BLOCKS * 16 + 5)[0]
    cfg = EngineConfig(max_model_len=512)
    first_disk = DiskTier(tmp_path / "pc", 1 << 30)
    run(build_engine(tiny=True, engine_config=cfg, prompt_tiers=PromptTiers(None, first_disk)), target,
        PARAMS[0], "a")
    first_disk.flush()
    for other in (EngineConfig(max_model_len=512, kv_cache_dtype="int8"), EngineConfig(max_model_len=512,
                                                                                       block_size=32)):
        engine = build_engine(tiny=True, engine_config=other,
                              prompt_tiers=PromptTiers(None, DiskTier(tmp_path / "pc", 1 << 30)))
        out = run(engine, target, PARAMS[0], "b")
        assert out.num_cached_tokens == 0 and engine.stats().prompt_cache["disk_hit_blocks"] == 0
    same = build_engine(tiny=True, engine_config=cfg,
                        prompt_tiers=PromptTiers(None, DiskTier(tmp_path / "pc", 1 << 30)))
    assert run(same, target, PARAMS[0], "c").cached_by_tier["disk"] > 0
