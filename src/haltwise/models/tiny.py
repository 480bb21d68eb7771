"""A tiny random-weight Llama so unit tests of the engine run in milliseconds."""
from __future__ import annotations

from dataclasses import replace

import torch

from haltwise.config import ModelConfig
from haltwise.models.llama import LlamaForCausalLM


def tiny_config(vocab_size: int, **overrides) -> ModelConfig:
    """2 layers, hidden 64, 4 heads / 2 kv heads of 16, window 512; any field can be overridden."""
    base = ModelConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=16, max_position_embeddings=512,
                       rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
    return replace(base, **overrides)


def tiny_llama(vocab_size: int, seed: int = 0, max_model_len: int | None = None, **overrides) -> LlamaForCausalLM:
    """Deterministic for a given seed: weights ~ N(0, 0.02), norms ~ 1 + N(0, 0.1), float32, eval mode."""
    config = tiny_config(vocab_size, **overrides)
    model = LlamaForCausalLM(config, max_model_len or config.max_position_embeddings)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.02 * noise)
    return model.eval()
