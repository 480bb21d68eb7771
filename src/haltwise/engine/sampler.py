"""Batched sampling with per-row parameters: penalties, masks, temperature, top-k/p, min-p, seeds.

Logit edits run in a fixed order: penalties, then logit_bias, then the grammar bitmask, then the
min_tokens ban (eos and stop ids). Each edit touches its own row only (batch invariance). A bias never
overrules a later layer: a +100 bias on a token the grammar or the min_tokens ban forbids stays
forbidden (-inf), while a -100 bias on eos or a stop token is honoured (the token is all but never
sampled; max_tokens and the context window still end the request). The grammar wins: where the ban
would leave a constrained row no legal token, the ban is lifted for that row, so a structure that can
only end, ends. A constrained row with no legal token
at all is reported in `no_legal_token` and never sampled from. A row with a forced token (the engine
closing a reasoning section) gets that token; its seeded generator draws nothing for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from haltwise.kernels.native import build
from haltwise.outputs import TokenLogprob
from haltwise.sampling_params import SamplingParams
from haltwise.structured.bitmask import GrammarMask, apply_bitmask


@dataclass
class SamplingRow:
    """What the sampler needs to know about one sequence this step."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    masked_token_ids: frozenset[int] = frozenset()   # e.g. eos while under min_tokens
    generator: torch.Generator | None = None         # per-sequence, when the request has a seed
    forced_token_id: int | None = None               # the engine decided this token (a reasoning close): not sampled


@dataclass
class SamplerOutput:
    token_ids: list[int]
    finite: list[bool]                     # False: the row's logits had NaN/Inf; its token must not be used
    logprobs: list[TokenLogprob | None]
    no_legal_token: list[bool] | None = None   # True: the grammar allows nothing in this row; its token is unused


class Sampler:
    def __init__(self) -> None:
        native = build.load()
        self._argmax: Callable[[torch.Tensor], torch.Tensor] = (
            native.argmax_rows if native is not None else lambda x: x.max(dim=-1).indices)

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow],
                 grammar: GrammarMask | None = None) -> SamplerOutput:
        """logits: (B, V) float32, one row per entry of rows; grammar: bitmasks for the constrained rows."""
        # On one intra-op thread: the reductions over the vocabulary are the only OpenMP regions of a
        # native decode step, and each ends at a barrier that waits a scheduler slice for a thread a busy
        # neighbour core has descheduled (issue 26: (1, 49152) sum + max 15 ms with 2 threads, 0.3 ms
        # with 1 on a loaded 2-core host). One thread also makes the sums independent of --threads.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._sample(logits, rows, grammar)
        finally:
            torch.set_num_threads(threads)

    def _sample(self, logits: torch.Tensor, rows: list[SamplingRow], grammar: GrammarMask | None) -> SamplerOutput:
        # A row sum is NaN/Inf iff the row holds a NaN or an Inf (logits are far too small to overflow
        # a float32 sum of 50k values): one reduction instead of an elementwise test over (B, V).
        finite = torch.isfinite(logits.sum(dim=-1))                      # (B,)
        if not bool(finite.all()):
            logits = torch.where(finite[:, None], logits, torch.zeros_like(logits))
        raw = logits
        edits = [i for i, r in enumerate(rows)
                 if r.masked_token_ids or r.params.logit_bias or _has_penalties(r.params)]
        no_legal: list[bool] | None = None
        if edits or grammar is not None:
            logits = logits.clone()
            for i in edits:
                _apply_penalties(logits[i], rows[i])
                if rows[i].params.logit_bias:
                    _apply_bias(logits[i], rows[i].params.logit_bias)
            constrained = set(grammar.rows) if grammar is not None else set()
            if grammar is not None:
                apply_bitmask(logits, grammar)
            for i in edits:
                if rows[i].masked_token_ids:
                    _ban(logits[i], rows[i].masked_token_ids, lift_if_empty=i in constrained)
        token_ids = torch.empty(len(rows), dtype=torch.long)
        greedy = [i for i, r in enumerate(rows) if r.params.greedy]
        # A greedy pick is the first maximal index (torch's max(dim) and argmax agree). Under a grammar one
        # max over all rows serves both the dead-row test and the greedy choice (a second pass, plus a gather
        # of the constrained rows, cost as much as the mask itself); otherwise the native argmax_rows, one
        # pass 32 lanes wide (Gemma's (32, 262144): torch's max took ~20 ms a step on one thread).
        best = logits.max(dim=-1) if grammar is not None else None
        if best is not None:
            no_legal = _dead_rows(logits, grammar.rows, best.values)
        if greedy and len(greedy) == len(rows):
            token_ids = best.indices if best is not None else self._argmax(logits)   # a dead row's pick is unused
        elif greedy:
            token_ids[greedy] = best.indices[greedy] if best is not None else self._argmax(logits[greedy])
        sampled = [i for i, r in enumerate(rows) if not r.params.greedy and r.forced_token_id is None]
        if sampled:
            probs = _filtered_probs(logits[sampled], [rows[i].params for i in sampled])   # (S, V)
            for j, i in enumerate(sampled):
                # Exponential race: argmax(p / E) with E ~ Exp(1) draws from p; one generator per seeded sequence.
                noise = torch.empty_like(probs[j]).exponential_(generator=rows[i].generator)
                token_ids[i] = (probs[j] / noise).argmax()
        ids = token_ids.tolist()
        for i, r in enumerate(rows):
            if r.forced_token_id is not None:
                ids[i] = r.forced_token_id
        return SamplerOutput(ids, finite.tolist(), _logprobs(raw, ids, rows), no_legal)


def _ban(row: torch.Tensor, token_ids: frozenset[int], lift_if_empty: bool) -> None:
    """In place on one (V,) row: token_ids -> -inf; undone when lift_if_empty and nothing else is legal."""
    index = torch.tensor(sorted(token_ids), dtype=torch.long)
    saved = row[index].clone() if lift_if_empty else None
    row[index] = float("-inf")
    if saved is not None and not bool(torch.isfinite(row.max())):
        row[index] = saved


def _dead_rows(logits: torch.Tensor, constrained: list[int], row_max: torch.Tensor) -> list[bool]:
    """Flags constrained rows that allow no token (row_max: (B,) each row's max after the masks: -inf);
    their logits are zeroed so sampling stays defined."""
    dead = [False] * logits.shape[0]
    for row, ok in zip(constrained, torch.isfinite(row_max[constrained]).tolist()):
        if not ok:
            dead[row] = True
            logits[row] = 0.0
    return dead


def _has_penalties(p: SamplingParams) -> bool:
    return p.repetition_penalty != 1.0 or bool(p.frequency_penalty) or bool(p.presence_penalty)


def _apply_penalties(logits: torch.Tensor, row: SamplingRow) -> None:
    """In place on one (V,) row. repetition: HF semantics over prompt + output; frequency/presence: OpenAI, output only."""
    p = row.params
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(row.prompt_token_ids) | set(row.output_token_ids)), dtype=torch.long)
        if len(seen):
            vals = logits[seen]
            logits[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if (p.frequency_penalty or p.presence_penalty) and row.output_token_ids:
        counts = torch.bincount(torch.tensor(row.output_token_ids), minlength=logits.shape[0])[: logits.shape[0]]
        logits -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0)


def _apply_bias(logits: torch.Tensor, bias: tuple[tuple[int, float], ...]) -> None:
    """In place on one (V,) row: logits[id] += bias (OpenAI logit_bias; ids checked at admission)."""
    index = torch.tensor([t for t, _ in bias], dtype=torch.long)
    logits[index] += torch.tensor([b for _, b in bias], dtype=logits.dtype)


def _filtered_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """(S, V) logits -> (S, V) probabilities after temperature, top-k, top-p and min-p."""
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype)[:, None]
    logits = logits / temps
    top_k = [p.top_k for p in params]
    if any(k > 0 for k in top_k):
        for j, k in enumerate(top_k):
            if 0 < k < logits.shape[1]:
                kth = torch.topk(logits[j], k).values[-1]
                logits[j][logits[j] < kth] = float("-inf")
    probs = torch.softmax(logits, dim=-1)
    top_p = torch.tensor([p.top_p for p in params], dtype=probs.dtype)
    if bool((top_p < 1.0).any()):
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_p[:, None]
        drop[:, 0] = False        # a top_p that rounds to 0 in float32 (5e-324) would drop every token
        sorted_p[drop] = 0.0
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
    min_p = torch.tensor([p.min_p for p in params], dtype=probs.dtype)
    if bool((min_p > 0).any()):
        floor = probs.max(dim=-1, keepdim=True).values * min_p[:, None]
        probs = torch.where(probs < floor, torch.zeros_like(probs), probs)
    return probs / probs.sum(dim=-1, keepdim=True)


def _logprobs(raw: torch.Tensor, ids: list[int], rows: list[SamplingRow]) -> list[TokenLogprob | None]:
    wanted = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
    result: list[TokenLogprob | None] = [None] * len(rows)
    if not wanted:
        return result
    logp = torch.log_softmax(raw[wanted], dim=-1)
    for j, i in enumerate(wanted):
        k = rows[i].params.logprobs or 0
        top = torch.topk(logp[j], k) if k else None
        result[i] = TokenLogprob(ids[i], float(logp[j, ids[i]]),
                                 list(zip(top.indices.tolist(), top.values.tolist())) if top is not None else [])
    return result
