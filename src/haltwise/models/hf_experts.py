"""gpt-oss Hugging Face checkpoints -> the per-expert names the layers load (models/weights.py).

transformers saves gpt-oss's experts stacked, input-major and with gate and up interleaved:

    mlp.experts.gate_up_proj       (E, hidden, 2I)   columns g0 u0 g1 u1 ...
    mlp.experts.gate_up_proj_bias  (E, 2I)           the same interleaving
    mlp.experts.down_proj          (E, I, hidden)
    mlp.experts.down_proj_bias     (E, hidden)
    mlp.router.{weight,bias}       (E, hidden), (E,)
    self_attn.sinks                (heads,)

and each becomes mlp.experts.<e>.{gate,up,down}_proj.{weight,bias} ((out, in) rows, as nn.Linear holds them),
mlp.gate.{weight,bias} and self_attn.sinks.weight. Every other tensor passes unchanged.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import torch


def per_expert(weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    for name, t in weights:
        base, _, leaf = name.rpartition(".")
        if leaf == "sinks":
            yield f"{name}.weight", t
        elif base.endswith(".mlp.router"):
            yield f"{base.removesuffix('.router')}.gate.{leaf}", t
        elif base.endswith(".mlp.experts") and leaf in ("gate_up_proj", "gate_up_proj_bias"):
            kind = "bias" if leaf.endswith("_bias") else "weight"
            for e in range(t.shape[0]):
                w = t[e] if kind == "bias" else t[e].T                    # (2I,) or (2I, hidden)
                yield f"{base}.{e}.gate_proj.{kind}", w[0::2].contiguous()
                yield f"{base}.{e}.up_proj.{kind}", w[1::2].contiguous()
        elif base.endswith(".mlp.experts") and leaf in ("down_proj", "down_proj_bias"):
            kind = "bias" if leaf.endswith("_bias") else "weight"
            for e in range(t.shape[0]):
                yield f"{base}.{e}.down_proj.{kind}", (t[e] if kind == "bias" else t[e].T).contiguous()
        else:
            yield name, t
