"""Prompt-lookup speculative decoding (engine/speculation.py) on the tiny model: the draft index, exact
tokens on and off (greedy, seeded, penalties, logprobs), stops and limits inside accepted runs, KV."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings, strategies as st

from haltwise.config import EngineConfig
from haltwise.engine.admission import AdmissionPolicy
from haltwise.engine.prefix_chain import blocks_for
from haltwise.engine.factory import build_engine
from haltwise.engine.speculation import MAX_NGRAM, MIN_NGRAM, PromptLookup
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from tests.conftest import greedy
from tests.engine.scheduler_harness import make, make_seq

ECHO = ["Hello world, hello world, hello world, hello", "def f(x): return x\ndef f(x): return x\ndef",
        '{"a": 1, "b": 2} -> {"a": 1, "b": 2, "c"', "1, 2, 3, 4, 1, 2, 3, 4, 1, 2,"]
PLAIN = ["Once upon a time there was", "The little model", "Café, naïve, résumé"]
NO_LOOP = RepetitionDetection(enabled=False)


# ---- the draft index ------------------------------------------------------------------------------------
def reference_match(tokens: list[int]) -> int | None:
    """e of the most recent occurrence tokens[e-n:e] (e < len) of the longest suffix n in MIN..MAX, by brute force."""
    for n in range(min(MAX_NGRAM, len(tokens)), MIN_NGRAM - 1, -1):
        for e in range(len(tokens) - 1, n - 1, -1):
            if tokens[e - n:e] == tokens[len(tokens) - n:]:
                return e
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=60), st.integers(1, 8), st.data())
def test_lookup_proposes_what_followed_the_latest_longest_match(tokens, k, data):
    lookup = PromptLookup()
    for length in sorted(set(data.draw(st.lists(st.integers(1, len(tokens)), max_size=8))) | {len(tokens)}):
        prefix = tokens[:length]
        drafts = lookup.propose(prefix, k)
        e = reference_match(prefix)
        if e is None:
            assert drafts == []
            continue
        assert len(drafts) == k
        extended = prefix + drafts   # what followed the match, continued periodically past the end
        assert all(extended[e + i] == drafts[i] for i in range(k))
        assert drafts[0] == prefix[e]


def test_lookup_is_incremental():
    lookup = PromptLookup()
    tokens = [5, 6, 7, 8, 5, 6]
    assert lookup.propose(tokens, 3) == [7, 8, 5]
    tokens += [9, 5, 6]
    assert lookup.propose(tokens, 2) == [9, 5]        # the most recent occurrence of (5, 6) wins
    assert lookup.propose(tokens + [1, 2], 2) == []   # (6, 1, 2), (1, 2): never seen


# ---- the engine, on and off -----------------------------------------------------------------------------
def engine(k: int, **config):
    """Drafts in every step, whatever the batch (speculative_max_batch None): exactness is checked with
    several sequences verifying runs in one step."""
    return build_engine(engine_config=EngineConfig(**{"dtype": "auto", "kv_cache_memory": 4 * 2**20, "speculative_tokens": k,
                                                      "speculative_max_batch": None, **config}), tiny=True)


def run(eng, prompts, params, ids: bool = False):
    """{request id: final RequestOutput}, and the number of steps taken."""
    for i, p in enumerate(prompts):
        eng.add_request(f"r{i}", p if ids else eng.tokenizer.encode(p), params)
    final, steps = {}, 0
    while eng.has_unfinished():
        steps += 1
        for u in eng.step():
            if u.finished:
                final[u.request_id] = u
    return [final[f"r{i}"] for i in range(len(prompts))], steps


def same(a, b) -> None:
    for x, y in zip(a, b, strict=True):
        for ox, oy in zip(x.outputs, y.outputs, strict=True):
            assert oy.token_ids == ox.token_ids
            assert oy.text == ox.text
            assert oy.termination == ox.termination
            if ox.logprobs is not None:
                assert [(l.token_id, l.logprob, l.top) for l in oy.logprobs] == \
                       [(l.token_id, l.logprob, l.top) for l in ox.logprobs]


def accepted(outs) -> int:
    return sum(o.num_accepted_draft_tokens for out in outs for o in out.outputs)


@pytest.mark.parametrize("k", [1, 4, 8])
def test_greedy_tokens_identical_on_and_off(k):
    off, off_steps = run(engine(0), ECHO + PLAIN, greedy(40))
    on, on_steps = run(engine(k), ECHO + PLAIN, greedy(40))
    same(off, on)
    assert accepted(on) > 0 and on_steps < off_steps
    assert accepted(off) == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeded_sampling_identical_with_penalties_min_tokens_and_logprobs(seed):
    params = SamplingParams(temperature=0.7, top_k=8, seed=seed, max_tokens=48, logprobs=2, min_tokens=6,
                            repetition_penalty=1.1, frequency_penalty=0.2, presence_penalty=0.1, n=2,
                            repetition_detection=NO_LOOP)
    off, _ = run(engine(0), ECHO, params)
    on, _ = run(engine(4), ECHO, params)
    same(off, on)
    plain = replace(params, repetition_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, temperature=0.3)
    off, _ = run(engine(0), ECHO, plain)
    on, _ = run(engine(4), ECHO, plain)
    same(off, on)
    assert accepted(on) > 0


def test_no_drafts_in_steps_with_more_decodes_than_speculative_max_batch():
    """Three echo prompts ending at 40, 24 and 12 tokens, limit 2: the steps with three decodes draft
    nothing, the later ones (two, then one decode) do, and the tokens are decoding's."""
    off, _ = run(engine(0), ECHO[:3], greedy(40))
    eng = engine(4, speculative_max_batch=2)
    schedule, seen = eng.scheduler.schedule, []

    def recording(*args, **kwargs):
        out = schedule(*args, **kwargs)
        seen.append((sum(s.is_decode for s in out.scheduled), sum(len(s.draft_token_ids) for s in out.scheduled)))
        return out

    eng.scheduler.schedule = recording
    for i, (p, n) in enumerate(zip(ECHO[:3], (40, 24, 12))):
        eng.add_request(f"r{i}", eng.tokenizer.encode(p), greedy(n))
    final = {}
    while eng.has_unfinished():
        final.update((u.request_id, u) for u in eng.step() if u.finished)
    assert all(drafts == 0 for decodes, drafts in seen if decodes > 2)
    assert any(drafts > 0 for decodes, drafts in seen if decodes <= 2)
    assert any(decodes == 3 for decodes, _ in seen)
    for i, n in enumerate((40, 24, 12)):
        assert final[f"r{i}"].outputs[0].token_ids == off[i].outputs[0].token_ids[:n]


def test_each_position_is_sampled_after_the_drafts_accepted_before_it():
    """Logits that prefer A to B by 0.5 everywhere, frequency_penalty 0.3: decoding gives A, A, B (A's
    second repeat costs 0.6). Drafts A, A, A: the third position must see both accepted A's."""
    eng = engine(4)
    a, b = 100, 101
    state = eng.prepare_request("r", [5, 6, 7], greedy(10, frequency_penalty=0.3)).seqs[0]
    logits = torch.zeros(4, eng.model_config.vocab_size)
    logits[:, a], logits[:, b] = 1.0, 0.5
    first = eng.sampler(logits[:1], [state.sampling_row()]).token_ids[0]
    assert first == a and state.on_token(first, None) is None
    termination, num_accepted = eng.speculator.accept(state, [a, a, a], first, logits[1:], eng.sampler)
    assert termination is None and num_accepted == 2
    assert state.seq.output_token_ids == [a, a, b]


def test_stop_string_inside_an_accepted_run_cuts_exactly_there():
    eng = engine(0)
    [free], _ = run(eng, ECHO[:1], greedy(40))
    tokens = free.outputs[0].token_ids
    cut = 7   # the stop ends inside output token 7 (0-based), in the middle of a run of accepted drafts
    stop = eng.tokenizer.decode(tokens[:cut + 1])[:-1]
    assert stop not in eng.tokenizer.decode(tokens[:cut]), "the stop must end inside token 7"
    for include in (False, True):
        params = greedy(40, stop=[stop], include_stop_str_in_output=include)
        [off], off_steps = run(engine(0), ECHO[:1], params)
        [on], on_steps = run(engine(8), ECHO[:1], params)
        same([off], [on])
        assert off.outputs[0].termination.reason.value == "stop_string"
        assert off.outputs[0].termination.token_index == cut
        assert on_steps < cut, "the stop was reached in a multi-token run"
        assert accepted([on]) > 0


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5, 8, 9, 10, 17])
def test_max_tokens_exactly_honoured(max_tokens):
    off, _ = run(engine(0), ECHO, greedy(max_tokens))
    on, _ = run(engine(8), ECHO, greedy(max_tokens))
    same(off, on)
    assert all(len(o.outputs[0].token_ids) == max_tokens for o in on)
    assert all(o.outputs[0].finish_reason == "length" for o in on)


def test_context_window_exactly_honoured():
    eng_off, eng_on = engine(0, max_model_len=80), engine(8, max_model_len=80)
    off, _ = run(eng_off, ECHO, greedy(None))
    on, _ = run(eng_on, ECHO, greedy(None))
    same(off, on)
    for out in on:
        assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 80
        assert out.outputs[0].termination.reason.value == "context_limit"


def test_kv_blocks_all_returned_and_tables_trimmed_each_step():
    eng = engine(8, block_size=4)
    start = eng.allocator.num_free_blocks
    params = SamplingParams(temperature=1.0, top_k=3, seed=3, max_tokens=40, repetition_detection=NO_LOOP)
    for i, p in enumerate(ECHO + PLAIN):
        eng.add_request(f"r{i}", eng.tokenizer.encode(p), params if i % 2 else greedy(40))
    eng.add_request("gone", eng.tokenizer.encode(ECHO[0]), greedy(40))
    steps = 0
    while eng.has_unfinished():
        eng.step()
        steps += 1
        if steps == 3:
            eng.abort("gone")
        for seq in eng.scheduler.running:   # no block held past the sequence's length after a step
            assert blocks_for(seq.num_computed_tokens, 4) <= len(seq.block_table) <= blocks_for(seq.num_tokens, 4)
    assert eng.speculator.num_accepted > 0 and eng.speculator.num_drafted > eng.speculator.num_accepted
    assert eng.allocator.num_free_blocks == start
    assert eng.allocator.num_live_seqs == 0


def test_prefix_cache_after_speculation_gives_identical_text():
    """A second request whose prompt is the first's prompt + output hits blocks filled while speculating,
    rejected drafts included: their KV must be the verified tokens', or the text changes."""
    params = SamplingParams(temperature=1.0, top_k=3, seed=5, max_tokens=40, repetition_detection=NO_LOOP)
    outs = {}
    for k in (0, 6):
        eng = engine(k, block_size=4)
        [first], _ = run(eng, ECHO[:1], params)
        follow = list(first.prompt_token_ids) + list(first.outputs[0].token_ids)
        [second], _ = run(eng, [follow], replace(params, seed=9, max_tokens=8, logprobs=0), ids=True)
        assert second.num_cached_tokens >= len(follow) - 4
        outs[k] = (first, second)
        if k:
            assert eng.speculator.num_drafted > eng.speculator.num_accepted > 0, "drafts were rejected"
    same([outs[0][0], outs[0][1]], [outs[6][0], outs[6][1]])


# ---- the scheduler: drafts come last, from what is left ---------------------------------------------------
def decoding(sched, prompts, max_tokens=50):
    """Sequences that finished their prefill and sampled one token (each now decodes)."""
    seqs = [make_seq(p, max_tokens=max_tokens) for p in prompts]
    for s in seqs:
        sched.add(s)
    for _ in range(10):
        sched.after_step(sched.schedule())
    assert not any(s.num_uncomputed_tokens for s in seqs)
    for s in seqs:
        s.append_token(1)
    return seqs


@pytest.fixture(autouse=False)
def start_freely(monkeypatch):
    """Admission's watermark projection is not what the scheduler tests below are about."""
    monkeypatch.setattr(AdmissionPolicy, "may_start", lambda *args: True)


def test_drafts_take_only_the_budget_left_after_every_decode():
    sched = make(max_num_batched_tokens=5, speculative_max_batch=None)
    decoding(sched, [[1, 2, 3], [4, 5, 6], [7, 8, 9]])
    out = sched.schedule(lambda seq, k: [9] * k)
    assert [s.num_new_tokens for s in out.scheduled] == [1, 1, 1]
    assert [len(s.draft_token_ids) for s in out.scheduled] == [2, 0, 0]
    assert out.num_batched_tokens == 5


def test_drafts_never_preempt_and_shrink_to_the_free_blocks(start_freely):
    sched = make(num_blocks=3, block_size=4, speculative_max_batch=None)
    decoding(sched, [[1, 2, 3], [4, 5, 6], [7, 8, 9]], 8)  # 4 tokens each: one full block each, none free
    out = sched.schedule(lambda seq, k: [9] * k)
    assert not out.preempted and len(out.scheduled) == 3
    assert all(not s.draft_token_ids for s in out.scheduled)
    sched = make(num_blocks=4, block_size=4, speculative_max_batch=None)
    decoding(sched, [[1, 2, 3], [4, 5, 6], [7, 8, 9]], 8)  # one free block: 4 draft positions, for the first
    out = sched.schedule(lambda seq, k: [9] * k)
    assert not out.preempted
    assert [len(s.draft_token_ids) for s in out.scheduled] == [4, 0, 0]


def test_drafts_stay_below_what_max_tokens_allows():
    sched = make()
    decoding(sched, [[1, 2, 3]], max_tokens=4)            # 1 of 4 output tokens exists: a run may add 3
    out = sched.schedule(lambda seq, k: [9] * k)
    assert len(out.scheduled[0].draft_token_ids) == 2
