"""Hugging Face names -> the model's parameters, including the fused qkv_proj / gate_up_proj row slices."""
from __future__ import annotations

from typing import Callable, Iterable

import torch

# Hugging Face module suffix -> (fused module suffix, shard index): shards are stacked in this order.
FUSED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
         "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
_UNFUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def split_name(name: str) -> tuple[str, str, str]:
    """'model.layers.0.self_attn.q_proj.bias' -> ('model.layers.0.self_attn', 'q_proj', 'bias')."""
    base, _, kind = name.rpartition(".")
    module, _, leaf = base.rpartition(".")
    return module, leaf, kind


class WeightLoading:
    """Mixed into the causal LM (needs self.config, named_parameters)."""

    def shard_rows(self, fused: str, rows: int) -> list[int]:
        """Rows of each part of a fused projection of `rows` rows, in stacking order."""
        c = self.config
        if fused == "qkv_proj":
            return [c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim, c.num_kv_heads * c.head_dim]
        return [rows // 2, rows // 2]           # gate, up: an expert's width is its own

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]],
                     skip: Callable[[str], bool] | None = None) -> None:
        """Copy (Hugging Face name, tensor) pairs into the parameters, casting to their dtype.

        Every parameter must be covered (a tied lm_head is covered by embed_tokens, and a given
        lm_head.weight is ignored); unknown names and missing or mis-shaped weights raise ValueError
        naming them. skip(name): a weight the caller provides otherwise (models/mapped_weights.py) and
        that is neither expected nor accepted here.
        """
        params = dict(self.named_parameters())               # tied lm_head appears once, as embed_tokens
        loaded: set[str] = set()
        for name, tensor in weights:
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            if skip is not None and skip(name):
                raise ValueError(f"weight {name} is provided by the mapped file, not loaded")
            module, leaf, kind = split_name(name)
            if leaf in FUSED:
                fused, shard = FUSED[leaf]
                target = params.get(f"{module}.{fused}.{kind}")
                if target is None:
                    raise ValueError(f"unexpected weight {name}")
                sizes = self.shard_rows(fused, target.shape[0])
                start = sum(sizes[:shard])
                target = target[start:start + sizes[shard]]
            else:
                target = params.get(name)
                if target is None:
                    raise ValueError(f"unexpected weight {name}")
            if tuple(target.shape) != tuple(tensor.shape):
                raise ValueError(f"weight {name} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}")
            target.copy_(tensor)
            loaded.add(name)
            if leaf in _UNFUSED:                    # a checkpoint that stores it fused (phi3) covers every part
                loaded.update(f"{module}.{part}.{kind}" for part in _UNFUSED[leaf])
        missing = sorted(n for n in self.expected_weight_names() - loaded if skip is None or not skip(n))
        if missing:
            raise ValueError(f"missing weights: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")

    def expected_weight_names(self) -> set[str]:
        """The Hugging Face names load_weights needs (lm_head only when not tied)."""
        names = set()
        for name, _ in self.named_parameters():
            module, leaf, kind = split_name(name)
            if leaf in _UNFUSED:
                names.update(f"{module}.{part}.{kind}" for part in _UNFUSED[leaf])
            else:
                names.add(name)
        return names
