"""Test helper: drive LlamaForCausalLM through the paged KV cache with contiguous block tables.

Sequence s owns blocks [s * bps, (s + 1) * bps), so its position p lives in slot s * bps * block_size + p.
"""
from __future__ import annotations

import torch

from haltwise.models.attention import AttentionMetadata
from haltwise.engine.kv_cache import KVBudget, allocate_kv_caches
from haltwise.models.llama import LlamaForCausalLM


class PagedRunner:
    def __init__(self, model: LlamaForCausalLM, num_seqs: int, max_len: int, block_size: int = 16,
                 kv_dtype: str | None = None) -> None:
        """kv_dtype: the KV cache's storage (models/kv_codec.py); None = the model's own dtype."""
        self.model, self.block_size = model, block_size
        self.blocks_per_seq = -(-max_len // block_size)
        kv_dtype = kv_dtype or str(model.model.embed_tokens.weight.dtype).removeprefix("torch.")
        budget = KVBudget(model.config.kv_bytes_per_token(kv_dtype), block_size, num_seqs * self.blocks_per_seq)
        self.kv = allocate_kv_caches(model.config, budget, kv_dtype)

    def step(self, seq_ids: list[int], chunks: list[list[int]], starts: list[int]) -> torch.Tensor:
        """Run chunk i of sequence seq_ids[i] at positions starts[i]...; -> (B, vocab) last-row logits."""
        cap = self.blocks_per_seq * self.block_size
        ids, pos, slots, qsl = [], [], [], [0]
        for s, chunk, start in zip(seq_ids, chunks, starts):
            ids += chunk
            pos += range(start, start + len(chunk))
            slots += [s * cap + p for p in range(start, start + len(chunk))]
            qsl.append(qsl[-1] + len(chunk))
        tables = torch.stack([torch.arange(s * self.blocks_per_seq, (s + 1) * self.blocks_per_seq) for s in seq_ids])
        meta = AttentionMetadata(slot_mapping=torch.tensor(slots), query_start_loc=qsl,
                                 seq_lens=[st + len(c) for st, c in zip(starts, chunks)],
                                 block_tables=tables, block_size=self.block_size).prepare()
        last = torch.tensor(qsl[1:]) - 1
        return self.model(torch.tensor(ids), torch.tensor(pos), self.kv, meta, last)


def greedy(model: LlamaForCausalLM, prompt: list[int], max_new_tokens: int,
           block_size: int = 16) -> tuple[list[int], torch.Tensor]:
    """Prefill then one-token decodes; -> (new token ids, prefill logits (vocab,))."""
    runner = PagedRunner(model, 1, len(prompt) + max_new_tokens, block_size)
    logits = runner.step([0], [prompt], [0])
    prefill_logits = logits[0]
    out = [int(logits[0].argmax())]
    while len(out) < max_new_tokens:
        logits = runner.step([0], [[out[-1]]], [len(prompt) + len(out) - 1])
        out.append(int(logits[0].argmax()))
    return out, prefill_logits


def greedy_batch(model: LlamaForCausalLM, prompts: list[list[int]], max_new_tokens: int,
                 block_size: int = 16) -> list[list[int]]:
    """All prompts prefilled in one step, then decoded together one token a step -> new ids per prompt."""
    runner = PagedRunner(model, len(prompts), max(map(len, prompts)) + max_new_tokens, block_size)
    seqs = list(range(len(prompts)))
    logits = runner.step(seqs, prompts, [0] * len(prompts))
    out = [[int(row.argmax())] for row in logits]
    while len(out[0]) < max_new_tokens:
        logits = runner.step(seqs, [[o[-1]] for o in out], [len(p) + len(o) - 1 for p, o in zip(prompts, out)])
        for o, row in zip(out, logits):
            o.append(int(row.argmax()))
    return out
