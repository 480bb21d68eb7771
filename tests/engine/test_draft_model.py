"""Draft-model speculative decoding (engine/draft_model.py) on tiny random models sharing the tiny tokenizer:
the target's tokens with and without the draft (greedy, seeded, alone, batched), stops and limits inside
accepted runs, the coupled seeded proposal, the adaptive length, both KV pools after finish/abort/preemption."""
from __future__ import annotations

import pytest

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.engine.speculation import DraftLength
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from tests.conftest import greedy
from tests.engine.test_speculation import ECHO, PLAIN, run, same

NO_LOOP = RepetitionDetection(enabled=False)
SEEDED = SamplingParams(temperature=0.8, top_k=20, seed=3, max_tokens=40, repetition_detection=NO_LOOP)
# "tiny:1:2": another 2-layer random model (drafts often rejected); "tiny:0:1": the target's first layer
# alone (mostly accepted greedy, partly seeded); "tiny": the target's own weights.
DRAFTS = ["tiny:1:2", "tiny:0:1"]


def engine(draft: str | None, **config):
    """Prompt lookup off, so every draft is the draft model's; drafts whatever the batch unless asked."""
    return build_engine(engine_config=EngineConfig(**{
        "dtype": "auto", "kv_cache_memory": 4 * 2**20, "speculative_tokens": 0, "speculative_max_batch": None,
        "draft_model": draft or "none", **config}), tiny=True)


def model_counts(eng) -> tuple[int, int]:
    return eng.speculator.num_model_drafted, eng.speculator.num_model_accepted


@pytest.mark.parametrize("draft", DRAFTS)
@pytest.mark.parametrize("params", [greedy(40), SEEDED,
                                    SamplingParams(temperature=0.7, top_k=8, seed=5, max_tokens=32, logprobs=2,
                                                   min_tokens=6, repetition_penalty=1.1, frequency_penalty=0.2,
                                                   n=2, repetition_detection=NO_LOOP)],
                         ids=["greedy", "seeded", "seeded-penalties-n2"])
def test_tokens_identical_with_and_without_the_draft_batched(draft, params):
    off, _ = run(engine(None), ECHO + PLAIN, params)
    eng = engine(draft)
    on, _ = run(eng, ECHO + PLAIN, params)
    same(off, on)
    drafted, accepted = model_counts(eng)
    assert accepted > 0
    if draft == "tiny:1:2":
        assert drafted > accepted, "rejections happened: the corrected tokens are the target's"


@pytest.mark.parametrize("params", [greedy(40), SEEDED], ids=["greedy", "seeded"])
def test_tokens_identical_alone_on_the_default_batch_limit(params):
    for prompt in ECHO[:2] + PLAIN[:1]:
        off, _ = run(engine(None, speculative_max_batch=1), [prompt], params)
        eng = engine("tiny:1:2", speculative_max_batch=1)
        on, steps = run(eng, [prompt], params)
        same(off, on)
        assert model_counts(eng)[1] > 0


def test_the_targets_own_weights_as_draft_are_always_accepted():
    """Coupled proposals: a draft identical to the target proposes the very token the target samples,
    greedy and seeded (same noise), so every draft is accepted unless the sequence ended inside the run."""
    eng = engine("tiny")
    run(eng, ECHO + PLAIN, greedy(40))
    drafted, accepted = model_counts(eng)
    assert drafted == accepted > 0
    eng = engine("tiny")
    outs, _ = run(eng, ECHO + PLAIN, SEEDED)
    drafted, accepted = model_counts(eng)
    ended_early = sum(1 for o in outs if o.outputs[0].finish_reason != "length")
    assert drafted - accepted <= ended_early * eng.config.draft_max_tokens
    assert accepted >= 0.9 * drafted


def test_stop_string_inside_an_accepted_run_cuts_exactly_there():
    [free], _ = run(engine(None), ECHO[:1], greedy(40))
    tokens = free.outputs[0].token_ids
    eng = engine(None)
    cut = 7
    stop = eng.tokenizer.decode(tokens[:cut + 1])[:-1]
    assert stop not in eng.tokenizer.decode(tokens[:cut])
    for include in (False, True):
        params = greedy(40, stop=[stop], include_stop_str_in_output=include)
        [off], _ = run(engine(None), ECHO[:1], params)
        eng = engine("tiny")
        [on], on_steps = run(eng, ECHO[:1], params)
        same([off], [on])
        assert off.outputs[0].termination.reason.value == "stop_string"
        assert off.outputs[0].termination.token_index == cut
        assert on_steps < cut, "the stop was reached inside a multi-token run"


@pytest.mark.parametrize("max_tokens", [1, 2, 3, 5, 9, 17])
def test_max_tokens_exactly_honoured(max_tokens):
    off, _ = run(engine(None), ECHO, greedy(max_tokens))
    on, _ = run(engine("tiny", draft_max_tokens=8), ECHO, greedy(max_tokens))
    same(off, on)
    assert all(len(o.outputs[0].token_ids) == max_tokens for o in on)


def test_context_window_exactly_honoured():
    off, _ = run(engine(None, max_model_len=80), ECHO, greedy(None))
    on, _ = run(engine("tiny", max_model_len=80), ECHO, greedy(None))
    same(off, on)
    assert all(len(o.prompt_token_ids) + len(o.outputs[0].token_ids) == 80 for o in on)


def test_draft_length_adapts_within_one_and_k_max():
    assert DraftLength.first(8) == 4 and DraftLength.first(2) == 2
    assert DraftLength.next(4, 4, 4, 8) == 5 and DraftLength.next(8, 8, 8, 8) == 8
    assert DraftLength.next(4, 4, 1, 8) == 3 and DraftLength.next(1, 1, 0, 8) == 1
    eng = engine("tiny", draft_max_tokens=6)   # every draft accepted: the length climbs to k_max and stays
    lengths = []
    propose = eng.speculator.propose

    def recording(state, k_max):
        drafts = propose(state, k_max)
        lengths.append(len(drafts))
        return drafts

    eng.speculator.propose = recording
    run(eng, ECHO[:1], greedy(60))
    assert lengths[:3] == [4, 5, 6] and max(lengths) == 6


def test_both_pools_all_free_after_finish_abort_and_preemption():
    """A target pool of 24 blocks of 4 for 7 sequences: preemptions happen; a preempted sequence keeps
    no draft KV while it waits; at the end both pools are whole again."""
    eng = engine("tiny:0:1", block_size=4, kv_cache_memory=24 * 4 * 160, max_model_len=96)
    target_free, draft = eng.allocator.num_free_blocks, eng.speculator.draft
    for i, p in enumerate(ECHO + PLAIN):
        eng.add_request(f"r{i}", eng.tokenizer.encode(p), SEEDED if i % 2 else greedy(40))
    steps = 0
    while eng.has_unfinished():
        eng.step()
        steps += 1
        if steps == 4:
            eng.abort("r1")
        running = {s.seq_id for s in eng.scheduler.running}
        assert all(draft.blocks.peek(i) is None for r in eng.requests.values() for s in r.seqs
                   if (i := s.seq.seq_id) not in running), "a sequence not running holds draft KV"
    assert eng.scheduler.num_preemptions > 0 and model_counts(eng)[1] > 0
    assert eng.allocator.num_free_blocks == target_free and eng.allocator.num_live_seqs == 0
    assert draft.blocks.num_free_blocks == draft.blocks.num_blocks and draft.blocks.num_live_seqs == 0


def test_no_draft_model_where_speculation_cannot_run():
    eng = build_engine(engine_config=EngineConfig(dtype="float32", kv_cache_memory=4 * 2**20, draft_model="tiny"),
                       tiny=True)
    assert eng.draft is None, "not even loaded"
    assert eng.speculator.draft is None and not eng.speculator.use_draft
