"""Turns a scheduled batch into tensors, runs the model, returns last-position logits. No policy here."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from haltwise.models.attention import AttentionMetadata


@dataclass
class BatchRow:
    """One scheduled sequence: compute token_ids[start:end] at positions start..end-1."""

    token_ids: list[int]        # the sequence's full token list (only [start:end] is read)
    block_table: list[int]
    start: int                  # = num_computed_tokens before this step
    end: int                    # = start + num_new_tokens
    sample: bool                # True when end == len(token_ids): the last row's logits are wanted
    # Speculative drafts computed after token_ids[start:end] at positions end.. (sample is then True):
    # logits come back for the last position and every draft position (engine/speculation.py).
    draft_token_ids: list[int] = field(default_factory=list)
    # The sliding layers' blocks when they have a pool of their own (engine/window_blocks.py), same indexing.
    window_table: list[int] | None = None
    # Logits at every position start..end-1 (prompt logprobs, engine/prompt_logprobs.py); with sample the
    # last of them is the one sampled from, the drafts' follow.
    all_logits: bool = False

    @property
    def num_logits(self) -> int:
        if self.all_logits:
            return self.end - self.start + (len(self.draft_token_ids) if self.sample else 0)
        return 1 + len(self.draft_token_ids) if self.sample else 0


class ModelRunner:
    """Owns the model and its KV cache tensors; a pure function of the batch otherwise."""

    def __init__(self, model: torch.nn.Module, kv_caches: list[tuple[torch.Tensor, torch.Tensor]], block_size: int):
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size

    def progress(self) -> int:
        """The model's progress counter (LlamaForCausalLM.progress); 0 for a model without one."""
        progress = getattr(self.model, "progress", None)
        return progress() if progress is not None else 0

    @torch.inference_mode()
    def execute(self, rows: list[BatchRow]) -> torch.Tensor:
        """Returns (S, vocab) float32 logits: num_logits rows per row with sample=True, in order."""
        input_ids: list[int] = []
        positions: list[int] = []
        starts = [0]
        logits_rows: list[int] = []
        for row in rows:
            input_ids += row.token_ids[row.start: row.end] + row.draft_token_ids
            positions += range(row.start, row.end + len(row.draft_token_ids))
            starts.append(len(input_ids))
            logits_rows += range(len(input_ids) - row.num_logits, len(input_ids))
        meta = self._metadata(rows, [r.block_table for r in rows], starts)
        if rows[0].window_table is not None:
            meta.window = self._metadata(rows, [r.window_table for r in rows], starts)
        return self.model(torch.tensor(input_ids, dtype=torch.long), torch.tensor(positions, dtype=torch.long),
                          self.kv_caches, meta, torch.tensor(logits_rows, dtype=torch.long))

    def _metadata(self, rows: list[BatchRow], tables: list[list[int]], starts: list[int]) -> AttentionMetadata:
        bs = self.block_size
        slots = [table[p // bs] * bs + p % bs for row, table in zip(rows, tables)
                 for p in range(row.start, row.end + len(row.draft_token_ids))]
        width = max(len(t) for t in tables)
        return AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.long),
            query_start_loc=starts,
            seq_lens=[r.end + len(r.draft_token_ids) for r in rows],
            block_tables=torch.tensor([t + [0] * (width - len(t)) for t in tables], dtype=torch.long),
            block_size=bs,
            rope_seq_lens=[len(r.token_ids) for r in rows],  # dynamic rope: scaled for the whole known sequence
        ).prepare()
