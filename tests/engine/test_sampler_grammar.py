"""The sampler's grammar rules: mask after penalties, the min_tokens ban after the mask, grammar wins."""
from __future__ import annotations

import torch

from haltwise.engine.sampler import Sampler, SamplingRow
from haltwise.sampling_params import SamplingParams
from haltwise.structured.bitmask import GrammarMask, bitmask_width

V = 70


def bits_allowing(*rows_of_ids: list[int]) -> torch.Tensor:
    bits = torch.zeros(len(rows_of_ids), bitmask_width(V), dtype=torch.int32)
    for k, ids in enumerate(rows_of_ids):
        for t in ids:
            word = int(bits[k, t // 32]) | (1 << (t % 32))
            bits[k, t // 32] = word - 2**32 if word >= 2**31 else word
    return bits


def row(masked: frozenset[int] = frozenset(), **kw) -> SamplingRow:
    return SamplingRow(SamplingParams(temperature=0.0, **kw), [1, 2], [], masked)


def test_only_allowed_tokens_are_sampled_and_unconstrained_rows_are_untouched() -> None:
    logits = torch.randn(3, V)
    logits[:, 5] = 100.0                                  # every row's favourite, forbidden in row 1
    out = Sampler()(logits, [row(), row(), row()], GrammarMask([1], bits_allowing([40, 63])))
    assert out.token_ids[0] == 5 and out.token_ids[2] == 5
    assert out.token_ids[1] in (40, 63) and out.no_legal_token == [False, False, False]


def test_grammar_wins_over_the_min_tokens_ban() -> None:
    """Only the end token is legal and min_tokens bans it: the ban is lifted, the structure ends."""
    out = Sampler()(torch.randn(1, V), [row(frozenset({0}))], GrammarMask([0], bits_allowing([0])))
    assert out.token_ids == [0] and out.no_legal_token == [False]


def test_the_ban_still_applies_when_the_grammar_allows_more() -> None:
    logits = torch.zeros(1, V)
    logits[0, 0] = 50.0
    out = Sampler()(logits, [row(frozenset({0}))], GrammarMask([0], bits_allowing([0, 7])))
    assert out.token_ids == [7]


def test_a_row_with_no_legal_token_is_flagged_not_sampled() -> None:
    out = Sampler()(torch.randn(2, V), [row(), SamplingRow(SamplingParams(temperature=1.0, seed=1), [1], [])],
                    GrammarMask([0, 1], bits_allowing([], [])))
    assert out.no_legal_token == [True, True]


def test_penalties_come_before_the_mask() -> None:
    """A penalised allowed token still beats forbidden ones: the mask is applied to penalised logits."""
    logits = torch.full((1, V), -1.0)
    logits[0, 3] = 2.0
    logits[0, 9] = 10.0                                  # forbidden
    r = SamplingRow(SamplingParams(temperature=0.0, repetition_penalty=10.0), [3], [3])
    out = Sampler()(logits, [r], GrammarMask([0], bits_allowing([3, 4])))
    assert out.token_ids == [3]                           # 2.0 / 10 = 0.2 > -1.0
