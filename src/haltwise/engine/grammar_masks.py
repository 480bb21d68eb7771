"""The per-step grammar bitmasks: one preallocated (max_num_seqs, ceil(V/32)) int32 buffer, filled each step."""
from __future__ import annotations

import torch

from haltwise.engine.request_state import SeqOutputState
from haltwise.structured.bitmask import GrammarMask, bitmask_width
from haltwise.structured.llguidance_backend import LLGuidanceBackend


class GrammarMasks:
    """Fills the bitmasks of a step's constrained rows from their matchers (engine thread only)."""

    def __init__(self, structured: LLGuidanceBackend, max_num_seqs: int, vocab_size: int):
        self.structured = structured
        self._bits = torch.zeros(max_num_seqs, bitmask_width(vocab_size), dtype=torch.int32)

    def fill(self, sampled: list[SeqOutputState]) -> GrammarMask | None:
        """Bitmasks for the constrained rows of this step, filled into the preallocated buffer."""
        rows = [i for i, s in enumerate(sampled) if s.grammar_applies]
        if not rows:
            return None
        if len(rows) > self._bits.shape[0]:
            self._bits = torch.zeros(len(rows), self._bits.shape[1], dtype=torch.int32)
        bits = self._bits[:len(rows)]
        self.structured.fill_bitmask([sampled[i].matcher for i in rows], bits)
        for k, i in enumerate(rows):   # a section may still open before the answer: its open tag is legal
            section = sampled[i].reasoning
            if section is not None and not section.in_answer:
                _allow(bits[k], section.tags.open_id)
        return GrammarMask(rows, bits)


def _allow(bits_row: torch.Tensor, token_id: int) -> None:
    """Set token_id's bit in one (W,) int32 bitmask row (bit t % 32 of word t // 32)."""
    word = int(bits_row[token_id // 32]) | (1 << (token_id % 32))
    bits_row[token_id // 32] = word - (1 << 32) if word >= 1 << 31 else word
