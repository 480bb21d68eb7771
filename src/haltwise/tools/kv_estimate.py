"""`haltwise kv-estimate`: KV-cache bytes per token, per sequence, per batch, and tokens per budget.

bytes_per_token = 2 (K and V) x layers x kv_heads x bytes per stored row (head_dim x bytes per element;
int8: head_dim + a 4-byte float32 scale: models/kv_codec.py); the pool holds
floor(budget / (bytes_per_token x block_size)) blocks — the same KVBudget the engine allocates.
head_dim is the model's own (Gemma 3: 256, not hidden / heads). Sliding-window layers (Gemma 3: 5 of
every 6, window 512) keep only their window in a pool of their own, sized for --batch sequences as serve
sizes it for --max-num-seqs (engine/window_blocks.py): bytes_per_token then counts the full-context layers,
and the window pool is a fixed cost inside the budget (serve --swa-full counts every layer in full).
"""
from __future__ import annotations

import argparse
import json

from haltwise.config import AUTO_KV_DTYPE, EngineConfig, ModelConfig
from haltwise.engine.kv_cache import KVBudget
from haltwise.memory_size import parse_memory
from haltwise.engine.window_blocks import window_pool_blocks
from haltwise.models.kv_codec import KV_DTYPES, row_bytes


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF file, HF directory or config.json (default: SmolLM2)")
    p.add_argument("--layers", type=int, help="override: number of layers")
    p.add_argument("--kv-heads", type=int, help="override: KV heads")
    p.add_argument("--head-dim", type=int, help="override: head dimension")
    p.add_argument("--dtype", default=AUTO_KV_DTYPE, choices=list(KV_DTYPES),
                   help=f"the KV cache dtype (serve's --kv-cache-dtype; default {AUTO_KV_DTYPE}, serve's default)")
    p.add_argument("--seq-len", type=int, default=8192, help="tokens per sequence")
    p.add_argument("--batch", type=int, default=32, help="concurrent sequences")
    p.add_argument("--memory", default="512MiB", help="KV budget to size (as --kv-cache-memory; auto = what serve would take here)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--json", action="store_true")


def estimate(layers: int, kv_heads: int, head_dim: int, dtype: str, seq_len: int, batch: int, memory: int,
             block_size: int, sliding_layers: int = 0, window: int | None = None) -> dict:
    config = shape_config(layers, kv_heads, head_dim, seq_len, sliding_layers, window)
    budget = KVBudget.from_memory(config, dtype, block_size, memory, _window_blocks(config, block_size, batch, seq_len))
    per_token = budget.bytes_per_token
    blocks_per_seq = -(-seq_len // block_size)
    counted = layers - (sliding_layers if budget.window_blocks else 0)
    result = {
        "formula": f"2 x {counted} layers x {kv_heads} kv_heads x {row_bytes(dtype, head_dim)} bytes per {dtype} "
                   f"row of {head_dim}",
        "bytes_per_token": per_token,
        "bytes_per_sequence": blocks_per_seq * block_size * per_token,   # whole blocks, as allocated
        "bytes_per_batch": batch * blocks_per_seq * block_size * per_token + budget.window_bytes,
        "seq_len": seq_len, "batch": batch, "memory_budget": memory, "block_size": block_size,
        "blocks_in_budget": budget.num_blocks,
        "tokens_in_budget": budget.num_tokens,
        "sequences_in_budget": budget.num_blocks // blocks_per_seq,
    }
    if budget.window_blocks:
        result["window_pool_bytes"] = budget.window_bytes      # the sliding layers' own pool, for `batch` sequences
    return result


def shape_config(layers: int, kv_heads: int, head_dim: int, seq_len: int, sliding_layers: int = 0,
                 window: int | None = None) -> ModelConfig:
    """A ModelConfig with just the KV cache's dimensions (the sliding layers first: only their count matters)."""
    types = ("sliding_attention",) * sliding_layers + ("full_attention",) * (layers - sliding_layers)
    return ModelConfig(vocab_size=1, hidden_size=kv_heads * head_dim, intermediate_size=1, num_layers=layers,
                       num_heads=kv_heads, num_kv_heads=kv_heads, head_dim=head_dim, max_position_embeddings=seq_len,
                       sliding_window=window if sliding_layers else None, layer_types=types)


def _window_blocks(config: ModelConfig, block_size: int, batch: int, seq_len: int) -> int:
    return window_pool_blocks(config, EngineConfig(block_size=block_size, max_num_seqs=batch), seq_len)


def run(args: argparse.Namespace) -> int:
    layers, kv_heads, head_dim = args.layers, args.kv_heads, args.head_dim
    if None in (layers, kv_heads, head_dim):
        config = _config(args.model)
        layers = layers or config.num_layers
        kv_heads = kv_heads or config.num_kv_heads
        head_dim = head_dim or config.head_dim
    sliding = sliding_info(config) if None in (args.layers, args.kv_heads, args.head_dim) else {}
    shape = (layers, kv_heads, head_dim, args.dtype, args.seq_len, args.batch)
    window = (args.block_size, sliding.get("sliding_layers", 0), sliding.get("sliding_window"))
    memory = parse_memory(args.memory)
    if memory == "auto":   # as `--kv-cache-memory auto` would size it on this host (engine/factory.py)
        from haltwise.engine.kv_cache import auto_pool_memory

        config = shape_config(layers, kv_heads, head_dim, args.seq_len, *window[1:])
        memory = auto_pool_memory(config, args.dtype, args.block_size, args.seq_len, args.batch,
                                  _window_blocks(config, args.block_size, args.batch, args.seq_len))
    result = estimate(*shape, memory, *window)
    result.update(sliding)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            shown = f"{value} ({value / 2**20:.2f} MiB)" if key.startswith("bytes") else value
            print(f"{key:>20}: {shown}")
    return 0


def sliding_info(config: ModelConfig) -> dict:
    """How many layers attend through a sliding window, and its width (0 and None without one)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None) or ()
    sliding = sum(1 for t in types if t == "sliding_attention") if window else 0
    return {"sliding_layers": sliding, "sliding_window": window if sliding else None}


def _config(model: str | None) -> ModelConfig:
    from pathlib import Path

    if model and Path(model).name == "config.json":
        model = str(Path(model).parent)
    from haltwise.tools.model_args import read_model_config

    return read_model_config(model)[1]
