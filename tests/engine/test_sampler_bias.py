"""logit_bias in the sampler: it bans and forces, greedy and seeded, row by row, and loses to the grammar
and the min_tokens ban (what wins is stated in engine/sampler.py)."""
from __future__ import annotations

import torch

from haltwise.engine.sampler import Sampler, SamplingRow
from haltwise.sampling_params import SamplingParams
from haltwise.structured.bitmask import GrammarMask
from tests.engine.test_sampler_grammar import V, bits_allowing


def row(bias: dict[int, float] | None = None, seed: int | None = None, masked: frozenset[int] = frozenset(),
        **kw) -> SamplingRow:
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    params = SamplingParams(logit_bias={str(k): v for k, v in (bias or {}).items()}, seed=seed, **kw)
    return SamplingRow(params, [1, 2], [], masked, gen)


def test_minus_100_bans_the_favourite_and_plus_100_forces_a_token_greedy_and_seeded() -> None:
    torch.manual_seed(0)
    x = torch.randn(1, V)
    x[0, 5] = 20.0                          # the clear favourite
    top = int(x[0].argmax())
    for kw in ({"temperature": 0.0}, {"temperature": 1.0, "seed": 7}):
        assert Sampler()(x, [row({5: -100.0}, **kw)]).token_ids[0] != 5
        assert Sampler()(x, [row({33: 100.0}, **kw)]).token_ids == [33]
        assert Sampler()(x, [row({}, **kw)]).token_ids == [top]


def test_a_bias_touches_only_its_own_row() -> None:
    """Batch invariance: each row's token is the one it gets alone, biased neighbours or not."""
    torch.manual_seed(1)
    x = torch.randn(4, V)
    rows = [row({int(x[0].argmax()): -100.0}, temperature=0.0), row(temperature=0.0),
            row({3: 100.0}, temperature=1.0, seed=3), row(temperature=1.0, seed=4)]
    together = Sampler()(x, rows).token_ids
    fresh = [row({int(x[0].argmax()): -100.0}, temperature=0.0), row(temperature=0.0),
             row({3: 100.0}, temperature=1.0, seed=3), row(temperature=1.0, seed=4)]
    alone = [Sampler()(x[i:i + 1], [fresh[i]]).token_ids[0] for i in range(4)]
    assert together == alone and together[1] == int(x[1].argmax()) and together[2] == 3


def test_the_grammar_wins_over_a_plus_100_bias() -> None:
    x = torch.randn(1, V)
    out = Sampler()(x, [row({5: 100.0}, temperature=0.0)], GrammarMask([0], bits_allowing([40, 63])))
    assert out.token_ids[0] in (40, 63)


def test_the_min_tokens_ban_wins_over_a_plus_100_bias() -> None:
    """eos banned under min_tokens stays banned, whatever its bias."""
    out = Sampler()(torch.randn(1, V), [row({0: 100.0}, masked=frozenset({0}), temperature=0.0)])
    assert out.token_ids[0] != 0


def test_logprobs_are_the_models_own_before_the_bias() -> None:
    x = torch.randn(1, V)
    plain = Sampler()(x, [row(temperature=0.0, logprobs=0)]).logprobs[0]
    biased = Sampler()(x, [row({int(x[0].argmax()): 5.0}, temperature=0.0, logprobs=0)]).logprobs[0]
    assert biased.token_id == plain.token_id and biased.logprob == plain.logprob
