"""Turns a scheduled batch into tensors, runs the model, returns last-position logits. No policy here."""
from __future__ import annotations

from dataclasses import dataclass

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


class ModelRunner:
    """Owns the model and its KV cache tensors; a pure function of the batch otherwise."""

    def __init__(self, model: torch.nn.Module, kv_caches: list[tuple[torch.Tensor, torch.Tensor]], block_size: int):
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size

    @torch.inference_mode()
    def execute(self, rows: list[BatchRow]) -> torch.Tensor:
        """Returns (S, vocab) float32 logits for the rows with sample=True, in order."""
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        starts = [0]
        logits_rows: list[int] = []
        for row in rows:
            input_ids += row.token_ids[row.start: row.end]
            positions += range(row.start, row.end)
            slots += [row.block_table[p // bs] * bs + p % bs for p in range(row.start, row.end)]
            starts.append(len(input_ids))
            if row.sample:
                logits_rows.append(len(input_ids) - 1)
        width = max(len(r.block_table) for r in rows)
        tables = torch.tensor([r.block_table + [0] * (width - len(r.block_table)) for r in rows], dtype=torch.long)
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.long),
            query_start_loc=starts,
            seq_lens=[r.end for r in rows],
            block_tables=tables,
            block_size=bs,
            rope_seq_lens=[len(r.token_ids) for r in rows],  # dynamic rope: scaled for the whole known sequence
        ).prepare()
        return self.model(torch.tensor(input_ids, dtype=torch.long), torch.tensor(positions, dtype=torch.long),
                          self.kv_caches, meta, torch.tensor(logits_rows, dtype=torch.long))
