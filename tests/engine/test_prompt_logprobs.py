"""Prompt logprobs in the engine (tiny random model): a prompt token scores what the engine reports when it
generates that token after the same prefix; chunking, prefix-cache hits and siblings change nothing."""
from __future__ import annotations

import pytest

from haltwise.sampling_params import ParamError, SamplingParams
from tests.conftest import NO_LOOP
from tests.engine.test_engine import tiny_engine

PROMPT = "Once upon a time there was a little model that"


def run(engine, prompt_ids, params, rid="r"):
    engine.add_request(rid, prompt_ids, params)
    final = None
    while engine.has_unfinished():
        for update in engine.step():
            if update.finished and update.request_id == rid:
                final = update
    return final


def score(engine, ids, k=0, rid="s"):
    return run(engine, ids, SamplingParams(max_tokens=0, prompt_logprobs=k, logprobs=0), rid)


def test_prompt_logprobs_equal_the_generated_ones_for_the_same_tokens() -> None:
    engine = tiny_engine()
    prompt = engine.tokenizer.encode(PROMPT)
    gen = run(engine, prompt, SamplingParams(temperature=1.0, seed=3, max_tokens=12, logprobs=0, ignore_eos=True,
                                             repetition_detection=NO_LOOP), "g").outputs[0]
    scored = score(engine, prompt + gen.token_ids)
    lps = scored.prompt_logprobs
    assert len(lps) == len(prompt) + 12 and lps[0] is None
    assert [lp.token_id for lp in lps[1:]] == (prompt + gen.token_ids)[1:]
    tail = lps[len(prompt):]
    assert [lp.logprob for lp in tail] == pytest.approx([lp.logprob for lp in gen.logprobs], abs=1e-5)
    out = scored.outputs[0]
    assert out.token_ids == [] and out.finish_reason == "length" and out.termination.reason.value == "max_tokens"


def test_chunking_and_prefix_cache_hits_do_not_change_the_scores() -> None:
    ids = tiny_engine().tokenizer.encode(PROMPT * 6)
    whole = score(tiny_engine(max_num_batched_tokens=2048), ids, k=3).prompt_logprobs
    engine = tiny_engine(max_num_batched_tokens=16, block_size=16)
    run(engine, ids, SamplingParams(max_tokens=2), "warm")           # fills the prefix cache with this prompt
    chunked = score(engine, ids, k=3)
    assert chunked.num_cached_tokens == 0                          # the hit was bypassed: every position scored
    assert len(chunked.prompt_logprobs) == len(ids) == len(whole)
    for a, b in zip(whole[1:], chunked.prompt_logprobs[1:]):
        assert a.token_id == b.token_id and a.rank == b.rank and a.logprob == pytest.approx(b.logprob, abs=1e-5)
        assert [t for t, _ in a.top] == [t for t, _ in b.top] and len(a.top) == 3
    # ranks agree with the top list: a token in the top 3 sits at its place there
    for lp in whole[1:]:
        tops = [t for t, _ in lp.top]
        assert (lp.rank <= 3) == (lp.token_id in tops)


def test_scoring_with_generation_and_siblings() -> None:
    engine = tiny_engine()
    ids = engine.tokenizer.encode(PROMPT)
    out = run(engine, ids, SamplingParams(n=2, temperature=1.0, seed=1, max_tokens=4, prompt_logprobs=1))
    assert len(out.prompt_logprobs) == len(ids) and all(len(o.token_ids) == 4 for o in out.outputs)
    assert [lp.logprob for lp in out.prompt_logprobs[1:]] == pytest.approx(
        [lp.logprob for lp in score(engine, ids).prompt_logprobs[1:]], abs=1e-5)


def test_max_tokens_zero_needs_prompt_logprobs() -> None:
    with pytest.raises(ParamError) as info:
        SamplingParams(max_tokens=0)
    assert info.value.param == "max_tokens"
