"""Scheduler budget edges: the long-prefill chunk cap, the last token of a step's budget, and an
unchunked prompt that fits in a step only thanks to the prefix cache.

Outputs come from the fake runner in scheduler_harness.py and are compared to a direct reference.
"""
from __future__ import annotations

from tests.engine.scheduler_harness import FakeRunner, assert_all_free, make, make_seq, reference


def test_long_prefill_chunk_caps_a_running_prefill_while_others_wait() -> None:
    scheduler = make(num_blocks=400, caching=False, max_num_batched_tokens=64, long_prefill_chunk=1)
    long = make_seq(list(range(100)), max_tokens=2)
    scheduler.add(long)
    first = scheduler.schedule()
    assert [s.num_new_tokens for s in first.scheduled] == [64]       # alone: the whole budget
    scheduler.after_step(first)
    short = make_seq([1, 2, 3], max_tokens=2)
    scheduler.add(short)
    second = scheduler.schedule()
    assert [(s.seq, s.num_new_tokens) for s in second.scheduled] == [(long, 1), (short, 3)]


def test_a_running_prefill_gets_the_last_token_of_the_budget() -> None:
    sched = make(num_blocks=64, caching=False, max_num_batched_tokens=4)
    decoders = [make_seq([i], max_tokens=10) for i in range(3)]
    long = make_seq(list(range(20)), max_tokens=2)
    for seq in (*decoders, long):
        sched.add(seq)
    runner = FakeRunner(sched)
    runner.step()                               # three 1-token prompts + 1 token of the long prompt
    second = runner.step()                      # three decodes leave exactly 1 token: the prefill takes it
    assert [(s.seq, s.num_new_tokens) for s in second.scheduled] == [(d, 1) for d in (*decoders, long)]
    runner.run()
    assert all(s.output_token_ids == reference(s.prompt_token_ids, s.params.max_tokens) for s in (*decoders, long))
    assert_all_free(sched)


def test_unchunked_prompt_counts_only_its_uncached_tokens_against_the_budget() -> None:
    sched = make(num_blocks=64, block_size=4, caching=True, max_num_batched_tokens=16, enable_chunked_prefill=False)
    system = list(range(16))
    first = make_seq(system, max_tokens=6)
    sched.add(first)
    runner = FakeRunner(sched)
    runner.step()                               # 16 prompt tokens: four full blocks cached
    second = make_seq(system + [7, 8, 9, 10], max_tokens=3)   # 20 tokens, 16 cached: 4 to compute
    sched.add(second)
    step = runner.step()
    assert [(s.seq, s.num_new_tokens) for s in step.scheduled] == [(first, 1), (second, 4)]
    runner.run()
    assert second.output_token_ids == reference(second.prompt_token_ids, 3)
    assert_all_free(sched)
