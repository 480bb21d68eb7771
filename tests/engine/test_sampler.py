"""The batched sampler: each row follows its own parameters."""
import math

import torch

from haltwise.engine.sampler import Sampler, SamplingRow
from haltwise.sampling_params import SamplingParams

V = 50


def row(prompt=(), output=(), masked=frozenset(), seed=None, **params):
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return SamplingRow(SamplingParams(**params), list(prompt), list(output), frozenset(masked), gen)


def logits(*rows):
    return torch.stack([torch.tensor(r, dtype=torch.float32) for r in rows])


def test_greedy_and_degenerate_filters_pick_the_argmax():
    torch.manual_seed(0)
    x = torch.randn(4, V)
    rows = [row(temperature=0), row(temperature=1.0, top_k=1), row(temperature=1.0, top_p=1e-6),
            row(temperature=1.0, min_p=1.0)]
    assert Sampler()(x, rows).token_ids == x.argmax(dim=-1).tolist()


def test_masked_ids_are_never_chosen_and_nan_rows_are_flagged():
    x = torch.zeros(2, V)
    x[0, 7] = 10.0
    x[1, 3] = float("nan")
    out = Sampler()(x, [row(temperature=0, masked={7}), row(temperature=0)])
    assert out.token_ids[0] != 7
    assert out.finite == [True, False]


def test_repetition_penalty_hf_semantics_and_openai_penalties():
    x = logits([2.0, -2.0, 1.9] + [0.0] * (V - 3))
    # HF: seen positive logits are divided, seen negative ones multiplied; token 0 (2.0 -> 1.0) loses to 2 (1.9).
    assert Sampler()(x, [row(prompt=[0, 1], temperature=0, repetition_penalty=2.0)]).token_ids == [2]
    # frequency 0.1 x 2 occurrences + presence 0.0: 2.0 - 0.2 = 1.8 < 1.9.
    assert Sampler()(x, [row(output=[0, 0], temperature=0, frequency_penalty=0.1)]).token_ids == [2]
    assert Sampler()(x, [row(output=[0], temperature=0, presence_penalty=0.05)]).token_ids == [0]


def test_seeded_rows_are_reproducible_and_follow_the_distribution():
    x = logits([math.log(p) for p in (0.6, 0.3, 0.1)] + [-1e9] * (V - 3))
    draws = [Sampler()(x, [row(seed=s, temperature=1.0)]).token_ids[0] for s in range(600)]
    share = [draws.count(t) / len(draws) for t in range(3)]
    assert abs(share[0] - 0.6) < 0.07 and abs(share[1] - 0.3) < 0.07 and abs(share[2] - 0.1) < 0.05
    again = [Sampler()(x, [row(seed=s, temperature=1.0)]).token_ids[0] for s in range(600)]
    assert draws == again


def test_top_k_and_top_p_cut_the_tail():
    x = logits([math.log(p) for p in (0.5, 0.3, 0.15, 0.05)] + [-1e9] * (V - 4))
    top_k = {Sampler()(x, [row(seed=s, temperature=1.0, top_k=2)]).token_ids[0] for s in range(200)}
    top_p = {Sampler()(x, [row(seed=s, temperature=1.0, top_p=0.7)]).token_ids[0] for s in range(200)}
    assert top_k == {0, 1} and top_p == {0, 1}


def test_a_top_p_that_rounds_to_zero_keeps_the_most_likely_token():
    """top_p = 5e-324 is valid (> 0) but 0.0 in float32: the first sorted token must still stay (the
    fuzz found every token dropped, NaN probabilities, token 0 sampled)."""
    x = logits([math.log(p) for p in (0.1, 0.6, 0.3)] + [-1e9] * (V - 3))
    picks = {Sampler()(x, [row(seed=s, temperature=1.0, top_p=5e-324)]).token_ids[0] for s in range(20)}
    assert picks == {1}


def test_logprobs_are_of_the_raw_distribution():
    x = logits([1.0, 2.0, 3.0] + [-1e9] * (V - 3))
    out = Sampler()(x, [row(temperature=0, logprobs=2)])
    lp = out.logprobs[0]
    expected = torch.log_softmax(x[0], dim=-1)
    assert lp.token_id == 2 and abs(lp.logprob - float(expected[2])) < 1e-6
    assert [t for t, _ in lp.top] == [2, 1]


def test_samples_on_one_thread_and_restores_torch_threads():
    """The vocabulary reductions run on one intra-op thread (no OpenMP barrier a busy neighbour core can
    stall, issue 26); the caller's thread count is back afterwards, also when sampling raises."""
    before = torch.get_num_threads()
    seen = []
    torch.set_num_threads(3)
    try:
        sampler = Sampler()
        real = sampler._sample
        sampler._sample = lambda *a: seen.append(torch.get_num_threads()) or real(*a)
        sampler(torch.randn(2, V), [row(temperature=0), row(temperature=1.0, seed=1)])
        assert seen == [1] and torch.get_num_threads() == 3
        sampler._sample = lambda *a: 1 / 0
        try:
            sampler(torch.randn(1, V), [row(temperature=0)])
        except ZeroDivisionError:
            pass
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
