"""Prompt logprobs: how likely the model found each prompt token, given the tokens before it.

A request that asks for them (SamplingParams.prompt_logprobs: `echo` + `logprobs`, or vLLM's
`prompt_logprobs`) gets logits at every prompt position it computes; the others keep logits at the last
position only. Logits at position p score prompt token p + 1:

    prompt:     t0    t1    t2   ...  t[n-1]
    logits at:  p=0 ->t1, p=1 ->t2, ..., p=n-2 -> t[n-1]; p=n-1 predicts the first generated token
    result:     [None, lp(t1), lp(t2), ..., lp(t[n-1])]        (t0 has no context: None, as OpenAI)

Such a sequence takes no prefix-cache hit (the cached positions' logits were never kept), and its chunks
are capped at PROMPT_LOGITS_CHUNK positions so a long prompt never materialises a (2048, vocab) block.
The values are computed as the sampler computes a generated token's logprob (log_softmax of the raw
logits on one thread), so the logprob of a prompt token equals the one reported when the server
generates that token after the same prefix.
"""
from __future__ import annotations

import torch

from haltwise.outputs import TokenLogprob

PROMPT_LOGITS_CHUNK = 256   # most prompt positions with logits per step for one sequence (memory: x vocab x 4 B)


def score_prompts(states: list, rows: list, logits: torch.Tensor) -> list[int]:
    """One step's logits, (S, V) for rows (model_runner.BatchRow) of states (request_state.SeqOutputState):
    each all-logits row's block goes to its sequence's PromptScores. Returns each sampling row's head, its
    index in logits (the row of its last position; its drafts' rows follow)."""
    heads, offset = [], 0
    for state, row in zip(states, rows):
        if row.all_logits:
            state.scores.add(logits[offset: offset + row.end - row.start], row.start)
            state.seq.needs_prompt_logits = not state.scores.done
        if row.sample:
            heads.append(offset + (row.end - row.start - 1 if row.all_logits else 0))
        offset += row.num_logits
    return heads


class PromptScores:
    """The prompt logprobs of one sequence, filled chunk by chunk; positions already scored are kept
    (a preempted sequence recomputes its prompt without rescoring it)."""

    def __init__(self, prompt_token_ids: list[int], top_k: int):
        self.prompt_token_ids = prompt_token_ids
        self.top_k = top_k
        self.logprobs: list[TokenLogprob | None] = [None]

    @property
    def done(self) -> bool:
        return len(self.logprobs) == len(self.prompt_token_ids)

    def add(self, logits: torch.Tensor, start: int) -> None:
        """logits: (C, V) raw float32 logits at positions start .. start + C - 1 of the sequence."""
        first = len(self.logprobs) - 1           # the next position to score (scores token first + 1)
        last = min(start + logits.shape[0], len(self.prompt_token_ids) - 1)   # exclusive
        if first < start or first >= last:
            return                                # nothing new here (or a gap: cannot happen, chunks are in order)
        rows = logits[first - start: last - start]
        targets = torch.tensor(self.prompt_token_ids[first + 1: last + 1], dtype=torch.long)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)                  # as the sampler: the same sums, bit for bit
        try:
            logp = torch.log_softmax(rows, dim=-1)                            # (R, V)
            chosen = logp.gather(1, targets[:, None])[:, 0]                   # (R,)
            ranks = (logp > chosen[:, None]).sum(dim=-1) + 1                  # 1 = the model's favourite
            top = torch.topk(logp, self.top_k) if self.top_k else None
        finally:
            torch.set_num_threads(threads)
        for j, token in enumerate(targets.tolist()):
            pairs = list(zip(top.indices[j].tolist(), top.values[j].tolist())) if top is not None else []
            self.logprobs.append(TokenLogprob(token, float(chosen[j]), pairs, int(ranks[j])))
