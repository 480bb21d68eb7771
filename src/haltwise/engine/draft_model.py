"""Draft-model proposals: a smaller model with the target's vocabulary guesses the next k tokens.

The draft model runs in the engine's process and thread, on its own KV pool (DraftBlocks: a block table
per sequence, no prefix cache, never preempting the target). To propose for a decoding sequence it first
catches up on the sequence's tokens its KV lacks (the whole prompt the first time, then the one or two
tokens the last verified run added), then decodes k tokens one at a time; the k-th is never fed back.

The proposal at draft position j is what the target's own sampler would pick from the DRAFT's logits at
that position with the randomness the target will use there: the same Sampler, the sequence's sampling
row (penalties, bans; the drafts so far as output), and for a seeded request a copy of its generator
advanced one draw per draft -- the draws the target makes while it accepts the run. Greedy, that is the
draft's argmax; seeded, draft and target race the same exponential noise, so wherever the two
distributions agree the proposals are accepted (a coupled proposal). The acceptance rule itself is the
prompt-lookup one (speculation.py): a draft is kept iff it equals the target's own sample at that
position, so the output is the target's, token for token, whatever the draft proposes. An unseeded
sampled request races a private generator (proposals must not consume the process's global stream).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from haltwise.config import ModelConfig
from haltwise.engine.draft_blocks import DraftBlocks
from haltwise.engine.model_runner import BatchRow, ModelRunner
from haltwise.engine.sampler import Sampler, SamplingRow
from haltwise.engine.sequence import Sequence

PAD_LOGIT = -1e30   # logits of ids the draft's head lacks: finite (the sampler's NaN/Inf test), never picked


@dataclass(frozen=True, slots=True)
class DraftInfo:
    """What start-up states about the draft model."""

    name: str
    num_layers: int
    hidden_size: int
    pool_tokens: int
    pool_bytes: int


class DraftModel:
    """Proposes drafts for one sequence at a time (module docstring); owns the draft's KV pool."""

    def __init__(self, model: torch.nn.Module, config: ModelConfig, kv_caches: list, blocks: DraftBlocks,
                 vocab_width: int, max_model_len: int, info: DraftInfo):
        """vocab_width: the target's logits width (the noise a seeded target draws is that wide)."""
        self.model = model
        self.config = config
        self.runner = ModelRunner(model, kv_caches, blocks.block_size)
        self.blocks = blocks
        self.vocab_width = vocab_width
        self.max_model_len = max_model_len
        self.info = info
        self.sampler = Sampler()
        self._unseeded = torch.Generator().manual_seed(0)

    def propose(self, seq: Sequence, k: int, row: SamplingRow) -> list[int]:
        """Up to k draft tokens to follow seq.token_ids ([] when the draft pool or window cannot hold
        the sequence). row: the sequence's sampling row now (its generator is not advanced)."""
        tokens = seq.token_ids
        n = len(tokens)
        k = min(k, self.max_model_len - n + 1)
        if k <= 0 or not self.blocks.reserve(seq.seq_id, n + k - 1):
            self.blocks.release(seq.seq_id)
            return []
        state = self.blocks.get(seq.seq_id)
        start = min(state.sync(tokens), n - 1)   # the last token's logits are always recomputed
        generator = self._race_generator(row)
        params = replace(row.params, logprobs=None)
        ids, drafts = list(tokens), []
        for j in range(k):
            logits = self._forward(ids, state.block_table, start)
            pick = SamplingRow(params, row.prompt_token_ids, row.output_token_ids + drafts, row.masked_token_ids,
                               generator)
            drafts.append(self.sampler(logits, [pick]).token_ids[0])
            if j == 0:   # KV now holds every position of ids
                state.tokens = list(ids)
            else:
                state.tokens.append(ids[-1])
            if j + 1 < k:
                start = len(ids)
                ids.append(drafts[-1])
        self.blocks.trim(seq.seq_id, len(ids))
        return drafts

    def release(self, seq_id: int) -> None:
        """The sequence finished or was preempted: its draft KV goes back to the pool."""
        self.blocks.release(seq_id)

    def _race_generator(self, row: SamplingRow) -> torch.Generator | None:
        """A copy of the sequence's generator (seeded), the private one (unseeded), None (greedy)."""
        if row.params.greedy:
            return None
        if row.generator is None:
            return self._unseeded
        copy = torch.Generator()
        copy.set_state(row.generator.get_state())
        return copy

    def _forward(self, ids: list[int], block_table: list[int], start: int) -> torch.Tensor:
        """(1, vocab_width) float32 logits after ids[start:], whose KV is written at positions start.."""
        logits = self.runner.execute([BatchRow(ids, block_table, start, len(ids), True)])
        width = logits.shape[1]
        if width == self.vocab_width:
            return logits
        if width > self.vocab_width:
            return logits[:, :self.vocab_width].contiguous()
        pad = torch.full((1, self.vocab_width - width), PAD_LOGIT, dtype=logits.dtype)
        return torch.cat([logits, pad], dim=1)

    def describe(self) -> str:
        i = self.info
        return (f"draft model {i.name} ({i.num_layers} layers, hidden {i.hidden_size}): its own KV pool of "
                f"{i.pool_tokens} tokens, {i.pool_bytes / 2**20:.1f} MiB")
