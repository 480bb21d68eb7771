"""Loads the draft model of --draft-model beside the target: its weights, plan, KV pool and vocabulary check.

Which draft (resolve_draft): "none" / None: no draft model; "auto": the one the catalog pairs with the
target (models/catalog.py), when its packages are installed; otherwise a catalog name or a path. With
tiny=True (tests) the draft is a tiny random model on the tiny tokenizer: "tiny" (the target's own
weights: every draft should be accepted) or "tiny:SEED:LAYERS".

The draft's KV pool is its own (DRAFT_POOL_TOKENS positions at most, in the engine's KV dtype), stated at
start by LLMEngine.describe; a draft whose vocabulary is not the target's id for id is refused.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import torch

from haltwise.config import EngineConfig, ModelConfig
from haltwise.engine.draft_blocks import DraftBlocks
from haltwise.engine.draft_model import DraftInfo, DraftModel
from haltwise.engine.draft_vocab import vocabulary_mismatch
from haltwise.engine.kv_cache import KVBudget, allocate_kv_caches
from haltwise.engine.speculation import speculation_unsupported
from haltwise.models.catalog import paired_draft
from haltwise.tokenizer.tokenizer import Tokenizer

log = logging.getLogger("haltwise.engine")
DRAFT_POOL_TOKENS = 16384   # the draft's KV pool: enough for a few long chats; a longer sequence is not drafted


class DraftModelError(ValueError):
    """The draft model cannot draft for this target (a different vocabulary)."""


def resolve_draft(spec: str | None, target: str | Path | None) -> str | None:
    """The draft model to load for target (a catalog name, a path, "tiny..."), or None for none."""
    if spec is None or str(spec).lower() == "none":
        return None
    if str(spec).lower() == "auto":
        return paired_draft(str(target) if target is not None else None)
    return str(spec)


def attach_draft(model: torch.nn.Module, config: ModelConfig, tokenizer: Tokenizer, name: str,
                 engine_config: EngineConfig, target_tokenizer: Tokenizer, target_config: ModelConfig,
                 max_model_len: int) -> DraftModel:
    """A DraftModel for an already planned draft `model` (raises DraftModelError for another vocabulary)."""
    _refuse_other_vocabulary(name, target_tokenizer, tokenizer)
    block_size = engine_config.block_size
    pool_tokens = min(DRAFT_POOL_TOKENS, max_model_len * engine_config.max_num_seqs)
    blocks = -(-pool_tokens // block_size)
    budget = KVBudget(config.kv_bytes_per_token(engine_config.kv_dtype), block_size, blocks)
    caches = allocate_kv_caches(config, budget, engine_config.kv_dtype)
    info = DraftInfo(name, config.num_layers, config.hidden_size, budget.num_tokens, budget.num_bytes)
    return DraftModel(model, config, caches, DraftBlocks(blocks, block_size), target_config.vocab_size,
                      max_model_len, info)


def check_draft(spec: str | None, target: str | Path | None, target_tokenizer: Tokenizer,
                tiny: bool = False) -> str | None:
    """The draft model to load (resolve_draft), its vocabulary checked against the target's from its file
    alone (before any costly load or plan); raises DraftModelError for another vocabulary."""
    name = resolve_draft(spec, target)
    if name is None or tiny:
        return name
    from haltwise.models.catalog import resolve_model

    path = resolve_model(name)
    tokenizer = Tokenizer.from_hf_dir(path) if path.is_dir() else Tokenizer.from_gguf(path)
    _refuse_other_vocabulary(name, target_tokenizer, tokenizer)
    return name


def build_draft(name: str | None, engine_config: EngineConfig, target_model: torch.nn.Module,
                target_config: ModelConfig, target_tokenizer: Tokenizer, plan: Callable,
                tiny: bool = False) -> DraftModel | None:
    """Load, plan and attach draft model `name` (check_draft's answer), or None: none asked, or speculation
    cannot run on this engine (then nothing is loaded). plan(model, path, tokenizer) plans its linears."""
    if name is None:
        return None
    if why := speculation_unsupported(target_config, target_model):
        log.info("draft model %s not loaded: speculation cannot run on this engine (%s)", name, why)
        return None
    if tiny:
        model, config, tokenizer, length = _tiny_draft(name, target_tokenizer, engine_config)
        plan(model, None, tokenizer)
    else:
        from haltwise.gguf.metadata import open_gguf
        from haltwise.models.loader import load_model

        weights_dtype = "bfloat16" if engine_config.dtype == "bfloat16" else "float32"
        loaded = load_model(name, dtype=weights_dtype, mapped=engine_config.dtype == "auto")
        tokenizer = (Tokenizer.from_gguf(loaded.path) if loaded.format == "gguf"
                     else Tokenizer.from_hf_dir(loaded.path))
        _refuse_other_vocabulary(name, target_tokenizer, tokenizer)
        model, config, length = loaded.model, loaded.config, loaded.max_model_len
        plan(model, loaded.path, tokenizer)
        if loaded.mapped:
            open_gguf(loaded.path).drop_resident_pages()
    draft = attach_draft(model, config, tokenizer, name, engine_config, target_tokenizer, target_config, length)
    log.info("%s", draft.describe())
    return draft


def _refuse_other_vocabulary(name: str, target: Tokenizer, draft: Tokenizer) -> None:
    if why := vocabulary_mismatch(target, draft):
        raise DraftModelError(f"draft model {name} cannot draft for this model: its vocabulary differs ({why}); "
                              "a draft model must share the target's tokenizer id for id")


def _tiny_draft(name: str, target_tokenizer: Tokenizer, engine_config: EngineConfig):
    """(model, config, tokenizer, max_model_len) of "tiny" / "tiny:SEED:LAYERS" (tests)."""
    from haltwise.models.tiny import tiny_llama

    parts = name.split(":")
    if parts[0] != "tiny" or len(parts) not in (1, 3):
        raise DraftModelError(f"with the tiny model the draft model is 'tiny' or 'tiny:SEED:LAYERS', got {name!r}")
    seed, layers = (int(parts[1]), int(parts[2])) if len(parts) == 3 else (0, 2)
    net = tiny_llama(target_tokenizer.vocab_size, seed=seed, max_model_len=engine_config.max_model_len,
                     num_layers=layers)
    return net, net.config, target_tokenizer, net.max_model_len
