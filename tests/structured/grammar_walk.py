"""Drive a matcher with random logits, no model: fill its mask, apply it, sample, consume, repeat."""
from __future__ import annotations

import torch

from haltwise.structured.bitmask import GrammarMask, apply_bitmask, bitmask_width


def random_walk(backend, grammar, vocab_size: int, seed: int, max_steps: int = 200,
                temperature: float = 1.5) -> tuple[list[int], bool]:
    """(token ids, completed): sample under the grammar's mask from N(0, 1) logits until it completes."""
    gen = torch.Generator().manual_seed(seed)
    matcher = grammar.new_matcher()
    bits = torch.zeros(1, bitmask_width(vocab_size), dtype=torch.int32)
    ids: list[int] = []
    for _ in range(max_steps):
        backend.fill_bitmask([matcher], bits)
        logits = torch.randn(1, vocab_size, generator=gen) * 3
        apply_bitmask(logits, GrammarMask([0], bits))
        probs = torch.softmax(logits / temperature, dim=-1)
        token = int(torch.multinomial(probs[0], 1, generator=gen))
        assert matcher.consume(token), matcher.error
        ids.append(token)
        if matcher.is_complete:
            return ids, True
    return ids, False
