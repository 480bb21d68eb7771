"""A routed mixture-of-experts MLP (qwen3moe, qwen2moe): router -> top-k -> experts -> fixed-order sum.

    router    logits = x W_r^T (row-local), p = softmax(logits) in float32, top-k experts per token,
              renormalised to sum 1 where the config says (norm_topk_prob)
    experts   one gated MLP each (fused gate_up_proj, down_proj: plain nn.Linear, so the kernel plan runs
              them in the checkpoint's own quantized format and a mapped GGUF keeps them in the file);
              a step's tokens are grouped by expert and each expert runs once, on its rows only
    combine   out[t] = sum over t's experts IN ASCENDING EXPERT INDEX of p[t, e] * expert_e(x[t])
    shared    (qwen2moe) + sigmoid(x w_g) * shared_expert(x), after the routed sum
    gpt-oss   router logits biased, top-k of the logits then softmax over those k; experts with biases and a
              clamped GLU (ClampedGluExpert)

Determinism contract: a token's output never depends on which other tokens share its step. The router is
computed one row at a time, each expert's linears are row-local (under the default path the plan picks a
batch-invariant format), and the sum over a token's experts runs in expert order, never arrival order.
Hugging Face names: mlp.gate.weight, mlp.experts.<e>.{gate,up,down}_proj.weight, mlp.shared_expert.*,
mlp.shared_expert_gate.weight -- as transformers saves Qwen MoE checkpoints.
"""
from __future__ import annotations

import torch
from torch import nn

from haltwise.config import ModelConfig

_ROWS_PER_CHUNK = 16   # the router's row-local product is materialised this many rows at a time


class RowLocalLinear(nn.Module):
    """A small float32 projection computed as a per-row dot product (never a GEMM whose blocking depends on
    the batch), so routing decisions are bit-identical whatever rows share the step. Not an nn.Linear: the
    kernel plan leaves it alone (a quantized router could flip a top-k choice)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(T, in) -> (T, out) float32."""
        w = self.weight.float()
        parts = [(x[i:i + _ROWS_PER_CHUNK, None, :].float() * w).sum(-1)          # (rows, out)
                 for i in range(0, x.shape[0], _ROWS_PER_CHUNK)]
        out = torch.cat(parts) if parts else x.new_zeros(0, w.shape[0])
        return out if self.bias is None else out + self.bias.float()


class ClampedGluExpert(nn.Module):
    """gpt-oss's expert: g, u = x W_gate_up + b (gate rows first); g = min(g, limit); u = clamp(u, -limit, limit);
    out = ((u + 1) * g * sigmoid(alpha g)) W_down + b_down. Plain nn.Linears, so the kernel plan runs them."""

    def __init__(self, config: ModelConfig, intermediate_size: int) -> None:
        super().__init__()
        self.intermediate_size = intermediate_size
        self.alpha, self.limit = config.expert_glu
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * intermediate_size, bias=True)
        self.down_proj = nn.Linear(intermediate_size, config.hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        gate, up = gate.clamp(max=self.limit), up.clamp(min=-self.limit, max=self.limit)
        return self.down_proj((up + 1) * (gate * torch.sigmoid(gate * self.alpha)))


class SparseMoE(nn.Module):
    def __init__(self, config: ModelConfig, mlp_class: type[nn.Module]) -> None:
        super().__init__()
        self.top_k, self.norm_topk_prob = config.num_experts_per_tok, config.norm_topk_prob
        self.topk_first = config.moe_router == "topk_softmax"
        self.gate = RowLocalLinear(config.hidden_size, config.num_experts, bias=self.topk_first)
        if config.expert_glu is not None:
            mlp_class = ClampedGluExpert
        self.experts = nn.ModuleList(mlp_class(config, config.moe_intermediate_size)
                                     for _ in range(config.num_experts))
        self.shared_expert = self.shared_expert_gate = None
        if config.shared_expert_intermediate_size:
            self.shared_expert = mlp_class(config, config.shared_expert_intermediate_size)
            self.shared_expert_gate = RowLocalLinear(config.hidden_size, 1)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (T, hidden) -> (weights (T, k) in x's dtype, expert ids (T, k))."""
        if self.topk_first:                                                 # gpt-oss
            logits, experts = torch.topk(self.gate(x), self.top_k, dim=-1)  # (T, k)
            return torch.softmax(logits, dim=-1).to(x.dtype), experts
        probs = torch.softmax(self.gate(x), dim=-1)                         # (T, E) float32
        weights, experts = torch.topk(probs, self.top_k, dim=-1)           # (T, k)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (T, hidden) -> (T, hidden)."""
        weights, experts = self.route(x)
        out = self.routed(x, weights, experts)
        if self.shared_expert is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)).to(x.dtype) * self.shared_expert(x)
        return out

    def routed(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """sum over each token's k experts of weight * expert(x), in ascending expert index.

        The T*k (token, expert) picks are sorted by expert (stably: by token within one), so each expert runs
        once on a contiguous slice of the gathered rows. Each pick's weighted output lands in its token's slot
        for that expert's rank among the token's k experts (ascending index), and the k slots are added to
        zeros in that order: the same float operations, in the same order, as a loop of index_add_ over the
        experts in ascending order -- one sort and a few whole-step ops in place of five ops an expert (torch's
        index_add_ sorts its index on an OpenMP team: a thread wait beside the native pool, every expert). Rows
        move by index_select only (advanced indexing and index_put_ took 120-350 us for 64 rows here)."""
        tokens, k = experts.shape
        flat = experts.reshape(-1)                                          # (T*k,) pick p = token * k + slot
        order = torch.argsort(flat, stable=True)                           # picks by expert, then token
        ids, counts = torch.unique_consecutive(flat[order], return_counts=True)
        picked = x.index_select(0, order // k)                              # (T*k, hidden) rows, by expert
        ys, start = [], 0
        for e, n in zip(ids.tolist(), counts.tolist()):
            ys.append(self.experts[e](picked[start:start + n]))            # (n_e, hidden), row-local
            start += n
        y = (torch.cat(ys) if ys else picked) * weights.reshape(-1)[order, None]
        rank = torch.empty_like(experts)                                    # rank[t, slot]: e's place among t's
        rank.scatter_(1, experts.argsort(dim=1), torch.arange(k).expand(tokens, k).contiguous())
        target = (order // k) * k + rank.reshape(-1)[order]                # pick -> token * k + rank: a permutation
        slots = y.index_select(0, torch.argsort(target)).view(tokens, k, x.shape[-1])
        out = torch.zeros_like(x)
        for j in range(k):                                                  # ascending expert index per token
            out += slots[:, j]
        return out
