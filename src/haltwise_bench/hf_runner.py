"""Hugging Face transformers as the reference peer, with its best plain CPU settings.

Settings (the ones transformers documents for fast CPU generation without compilation):
  * the same GGUF file loaded with `gguf_file=` and dequantized to the benchmark dtype;
  * `generate(do_sample=False, use_cache=True)`: greedy with the (dynamic) KV cache;
  * batches left-padded with an attention mask, so every row's last prompt token is aligned;
  * eos ignored by `min_new_tokens = max_new_tokens` (every row produces exactly max_new_tokens);
  * torch.inference_mode, sdpa attention (the default).
Time to first token is taken by a streamer: generate() calls `put` once with the prompt and then
once per generation step; the first call after the prompt is the first token.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from haltwise_bench.common import Timed

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _FirstTokenClock:
    """A transformers streamer that records when the first generated token arrives."""

    def __init__(self) -> None:
        self.calls = 0
        self.first_token_at: float | None = None

    def put(self, value: torch.Tensor) -> None:
        self.calls += 1
        if self.calls == 2 and self.first_token_at is None:  # call 1 is the prompt
            self.first_token_at = time.perf_counter()

    def end(self) -> None:
        pass


def load_hf_from_gguf(gguf_path: str | Path, dtype: str) -> Any:
    """AutoModelForCausalLM over the very GGUF haltwise runs (dequantized by transformers).

    This is `from_pretrained(dir, gguf_file=name)` without its device-placement step, which needs
    the `accelerate` package (not a haltwise dependency): transformers' own GGUF config parser and
    tensor loader (dequantization, q/k un-permutation), then a cast to `dtype`.
    """
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    path = Path(gguf_path)
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"{path}: transformers could not map all GGUF tensors: missing {missing[:3]}, "
                         f"unexpected {list(unexpected)[:3]}")
    model.tie_weights()
    return model.to(TORCH_DTYPES[dtype]).eval()


def hf_twin_of(net: torch.nn.Module, dtype: str) -> Any:
    """A transformers LlamaForCausalLM with the same config and weights as a haltwise Llama.

    Used for the tiny test model, which has no file on disk: the fused qkv / gate_up projections
    are split back into Hugging Face's q/k/v and gate/up weights.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    c = net.config
    hf_config = LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                            num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
                            num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim,
                            max_position_embeddings=c.max_position_embeddings, rope_theta=c.rope_theta,
                            rms_norm_eps=c.rms_norm_eps, tie_word_embeddings=c.tie_word_embeddings,
                            bos_token_id=None, eos_token_id=None, pad_token_id=0)
    twin = LlamaForCausalLM(hf_config)
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    state: dict[str, torch.Tensor] = {}
    for name, tensor in net.state_dict().items():
        module, _, leaf = name.removesuffix(".weight").rpartition(".")
        if leaf == "qkv_proj":
            for part, t in zip(("q_proj", "k_proj", "v_proj"), tensor.float().split([q, kv, kv])):
                state[f"{module}.{part}.weight"] = t
        elif leaf == "gate_up_proj":
            for part, t in zip(("gate_proj", "up_proj"), tensor.float().chunk(2)):
                state[f"{module}.{part}.weight"] = t
        elif name.endswith(".weight"):
            state[name] = tensor.float()
    missing, unexpected = twin.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (m == "lm_head.weight" and c.tie_word_embeddings) and "rotary" not in m]
    if missing or unexpected:
        raise ValueError(f"weight mapping incomplete: missing {missing[:3]}, unexpected {list(unexpected)[:3]}")
    return twin.to(TORCH_DTYPES[dtype]).eval()


class HFRunner:
    """Times transformers' generate() on batches of token-id prompts."""

    def __init__(self, model: Any, pad_token_id: int, name: str = "transformers") -> None:
        self.model = model
        self.pad_token_id = pad_token_id
        self.name = name

    def generate(self, prompts: list[list[int]], max_tokens: int) -> Timed:
        """One batched generate() call: greedy, left-padded, exactly max_tokens new tokens per row."""
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)  # (B, T)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)                        # (B, T)
        for row, p in enumerate(prompts):
            input_ids[row, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[row, width - len(p):] = 1
        clock = _FirstTokenClock()
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=max_tokens,
                                      min_new_tokens=max_tokens, do_sample=False, use_cache=True,
                                      pad_token_id=self.pad_token_id, streamer=clock,
                                      temperature=None, top_p=None, top_k=None)  # (B, T + max_tokens)
        wall = time.perf_counter() - start
        new = out.shape[1] - width
        ttft = (clock.first_token_at or time.perf_counter()) - start
        return Timed(wall, (ttft,) * len(prompts), new * len(prompts), sum(len(p) for p in prompts))
