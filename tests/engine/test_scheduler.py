"""Scheduler: budget and seq cap, decodes beside chunked prefills, preemption, prefix reuse, cleanup.

Outputs come from the fake runner in scheduler_harness.py and are compared to a direct reference.
"""
from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.engine.admission import AdmissionError
from haltwise.engine.sequence import SequenceStatus
from haltwise.stopping.termination import Reason, Termination
from tests.engine.scheduler_harness import FakeRunner, assert_all_free, make, make_seq, reference


def test_single_sequence_prefill_then_decodes() -> None:
    sched = make()
    seq = make_seq(list(range(10)), max_tokens=5)
    sched.add(seq)
    runner = FakeRunner(sched)
    first = runner.step()
    assert [(s.num_new_tokens, s.samples) for s in first.scheduled] == [(10, True)]
    runner.run()
    assert [out.num_batched_tokens for out in runner.steps] == [10, 1, 1, 1, 1]
    assert seq.output_token_ids == reference(list(range(10)), 5)
    assert seq.is_finished and seq.termination.reason == Reason.MAX_TOKENS and seq.finish_time is not None
    assert_all_free(sched)


def test_budget_and_seq_cap_respected_every_step() -> None:
    sched = make(num_blocks=256, max_num_seqs=4, max_num_batched_tokens=16)
    seqs = [make_seq([i] * (3 + 7 * i), max_tokens=4 + i) for i in range(10)]
    for seq in seqs:
        sched.add(seq)
    runner = FakeRunner(sched)
    runner.run()  # FakeRunner.check asserts budget, cap and block coverage each step
    assert max(len(out.scheduled) for out in runner.steps) == 4
    assert max(out.num_batched_tokens for out in runner.steps) == 16
    for seq in seqs:
        assert seq.output_token_ids == reference(seq.prompt_token_ids, seq.params.max_tokens)
    assert_all_free(sched)


def test_decodes_run_every_step_while_a_long_prompt_is_chunked() -> None:
    sched = make(num_blocks=256, max_num_batched_tokens=16)
    short = [make_seq([100 + i, 1, 2], max_tokens=40) for i in range(3)]
    for seq in short:
        sched.add(seq)
    runner = FakeRunner(sched)
    runner.step()  # all three short prompts start together
    long = make_seq(list(range(200)), max_tokens=3)
    sched.add(long)
    chunks = []
    while long.num_output_tokens == 0:
        out = runner.step()
        by_seq = {id(s.seq): s for s in out.scheduled}
        for seq in short:
            assert by_seq[id(seq)].is_decode  # never starved
        chunks.append(by_seq[id(long)].num_new_tokens)
        assert out.num_batched_tokens == 16 or long.num_output_tokens == 1  # full steps until the last chunk
    assert sum(chunks) == 200 and chunks[0] == 13 and len(chunks) == 16  # ceil(200 / 13)
    runner.run()
    assert long.output_token_ids == reference(list(range(200)), 3)
    assert_all_free(sched)


def test_unchunked_prompt_waits_until_it_fits_whole() -> None:
    sched = make(num_blocks=256, max_num_batched_tokens=16, enable_chunked_prefill=False)
    a = make_seq([1] * 10, max_tokens=10)
    sched.add(a)
    runner = FakeRunner(sched)
    runner.step()
    b = make_seq([2] * 16, max_tokens=2)  # 16 > 16 - 1 decode: waits for a step where it fits whole
    sched.add(b)
    while b.status == SequenceStatus.WAITING:
        out = runner.step()
        if b.status == SequenceStatus.WAITING:
            assert [s.seq for s in out.scheduled] == [a]
    assert a.is_finished and [(s.seq, s.num_new_tokens) for s in runner.steps[-1].scheduled] == [(b, 16)]
    runner.run()
    assert b.output_token_ids == reference([2] * 16, 2)
    assert_all_free(sched)


def test_unchunked_prompt_larger_than_budget_runs_alone() -> None:
    sched = make(num_blocks=256, max_num_batched_tokens=16, enable_chunked_prefill=False)
    a = make_seq([1] * 5, max_tokens=3)
    big = make_seq(list(range(40)), max_tokens=2)
    sched.add(a)
    sched.add(big)
    runner = FakeRunner(sched)
    runner.run()
    big_steps = [out for out in runner.steps if any(s.seq is big and s.num_new_tokens == 40 for s in out.scheduled)]
    assert len(big_steps) == 1 and len(big_steps[0].scheduled) == 1
    assert big.output_token_ids == reference(list(range(40)), 2)
    assert_all_free(sched)


@pytest.mark.parametrize("chunked", [True, False])
@pytest.mark.parametrize("caching", [True, False])
def test_preemption_with_a_tiny_pool_gives_identical_outputs(chunked: bool, caching: bool) -> None:
    # 12 blocks of 4; each sequence grows to 6 + 14 = 20 tokens = 5 blocks; 3 started at once overflow.
    sched = make(num_blocks=12, block_size=4, caching=caching, watermark=1.0,
                 max_num_batched_tokens=8, enable_chunked_prefill=chunked)
    seqs = [make_seq([10 + i] * 3 + [1, 2, 3], max_tokens=14) for i in range(5)]
    for seq in seqs:
        sched.add(seq)
    runner = FakeRunner(sched)
    runner.run()
    assert sched.num_preemptions > 0 and sum(s.num_preemptions for s in seqs) == sched.num_preemptions
    for before, out in zip(runner.running_before, runner.steps):
        # victims are taken from the back: the most recently admitted first
        assert out.preempted == list(reversed(before))[:len(out.preempted)]
    for seq in seqs:
        assert seq.output_token_ids == reference(seq.prompt_token_ids, 14)
    assert_all_free(sched)


def test_preempted_sequence_recomputes_prompt_and_generated_tokens_first_in_line() -> None:
    # 7 blocks of 4; a and b each write KV for 16 positions (4 blocks); max_num_seqs 2 keeps `late` queued.
    sched = make(num_blocks=7, block_size=4, watermark=1.0, caching=False, max_num_seqs=2)
    a, b = make_seq([1] * 5, max_tokens=12), make_seq([2] * 5, max_tokens=12)
    late = make_seq([3] * 5, max_tokens=2)
    for seq in (a, b, late):
        sched.add(seq)
    runner = FakeRunner(sched)
    for _ in range(100):
        if runner.step().preempted:
            break
    out = runner.steps[-1]
    assert out.preempted == [b]  # b was admitted after a
    assert b.status == SequenceStatus.WAITING and b.num_computed_tokens == 0 and b.block_table == []
    assert sched.waiting == (b, late) and b.num_output_tokens > 0 and b.num_preemptions == 1
    num_tokens = b.num_tokens
    done = len(runner.steps)
    runner.run()
    first = next(s for o in runner.steps[done:] for s in o.scheduled if s.seq is b)
    assert (first.start, first.num_new_tokens, first.samples) == (0, num_tokens, True)
    assert b.output_token_ids == reference([2] * 5, 12) and a.output_token_ids == reference([1] * 5, 12)
    assert late.output_token_ids == reference([3] * 5, 2)
    assert_all_free(sched)


def test_same_system_prompt_reuses_cached_blocks() -> None:
    sched = make(num_blocks=64, block_size=16)
    system = list(range(1000, 1040))
    first = make_seq(system + [1, 2], max_tokens=3)
    sched.add(first)
    runner = FakeRunner(sched)
    runner.run()
    second = make_seq(system + [5, 6, 7], max_tokens=3)
    sched.add(second)
    out = runner.step()
    assert second.num_cached_tokens == 32 and out.scheduled[0].num_new_tokens == 43 - 32
    runner.run()
    assert second.output_token_ids == reference(system + [5, 6, 7], 3)
    assert sched.allocator.prefix_cache_hits == 32
    assert_all_free(sched)


def test_budget_smaller_than_the_seq_cap_caps_running_sequences() -> None:
    sched = make(num_blocks=256, max_num_seqs=8, max_num_batched_tokens=3)
    seqs = [make_seq([i, i], max_tokens=6) for i in range(6)]
    for seq in seqs:
        sched.add(seq)
    runner = FakeRunner(sched)
    runner.run()
    assert max(len(out.scheduled) for out in runner.steps) == 3  # FakeRunner.step checks no decode is left out
    assert all(s.output_token_ids == reference(s.prompt_token_ids, 6) for s in seqs)
    assert_all_free(sched)


@settings(max_examples=150, deadline=None)
@given(
    num_blocks=st.integers(4, 32), block_size=st.sampled_from([1, 2, 4, 8]), watermark=st.sampled_from([0.5, 0.9, 1.0]),
    budget=st.integers(8, 40), max_seqs=st.integers(1, 8), chunked=st.booleans(), caching=st.booleans(),
    requests=st.lists(st.tuples(st.integers(1, 18), st.integers(1, 16), st.integers(0, 2), st.booleans()),
                      min_size=1, max_size=10),
    abort_at=st.integers(0, 30),
)
def test_any_mix_finishes_correctly_and_frees_everything(num_blocks, block_size, watermark, budget, max_seqs,
                                                         chunked, caching, requests, abort_at) -> None:
    sched = make(num_blocks=num_blocks, block_size=block_size, caching=caching, max_num_seqs=max_seqs,
                 max_num_batched_tokens=budget, enable_chunked_prefill=chunked, max_queue=6, watermark=watermark)
    runner = FakeRunner(sched)
    kept, aborted = [], []
    for i, (prompt_len, max_tokens, family, abort) in enumerate(requests):
        seq = make_seq([family] * (prompt_len // 2) + [i] * (prompt_len - prompt_len // 2), max_tokens=max_tokens)
        try:
            sched.add(seq)
        except AdmissionError as err:
            assert err.kind in ("too_large", "queue_full")
            continue
        (aborted if abort else kept).append(seq)
    for step in range(10_000):
        if not sched.has_unfinished():
            break
        if step == abort_at:
            for seq in aborted:
                for removed in sched.abort(seq.request_id):
                    sched.finish(removed, Termination(Reason.CANCELLED))
        runner.step()
    assert_all_free(sched)
    for seq in kept:
        assert seq.output_token_ids == reference(seq.prompt_token_ids, seq.params.max_tokens)


def test_preemption_stress_under_random_load() -> None:
    """Seeded random loads on pools too small for them: many preemptions, every output exact."""
    rng = random.Random(1234)
    total_preemptions = 0
    for _ in range(400):
        block_size = rng.choice([1, 2, 4])
        num_blocks = rng.randint(24, 48) // block_size
        sched = make(num_blocks=num_blocks, block_size=block_size, caching=rng.random() < 0.5, watermark=1.0,
                     max_num_batched_tokens=rng.randint(8, 24), enable_chunked_prefill=rng.random() < 0.7)
        runner = FakeRunner(sched)
        seqs = []
        for i in range(rng.randint(2, 8)):
            seq = make_seq([rng.randint(0, 1) for _ in range(rng.randint(1, 12))], max_tokens=rng.randint(1, 12))
            try:
                sched.add(seq)
            except AdmissionError:
                continue
            seqs.append(seq)
        for _ in range(rng.randint(0, 6)):
            runner.step()
        late = make_seq([rng.randint(0, 1) for _ in range(rng.randint(1, 12))], max_tokens=rng.randint(1, 12))
        with contextlib.suppress(AdmissionError):
            sched.add(late)
            seqs.append(late)
        runner.run()
        for before, out in zip(runner.running_before, runner.steps):
            assert out.preempted == list(reversed(before))[:len(out.preempted)]
        for seq in seqs:
            assert seq.output_token_ids == reference(seq.prompt_token_ids, seq.params.max_tokens)
        assert_all_free(sched)
        assert sum(seq.num_preemptions for seq in seqs) == sched.num_preemptions   # each one counted on its seq
        total_preemptions += sched.num_preemptions
    assert total_preemptions >= 150


def test_long_prefill_leaves_room_for_short_arrivals():
    """A running chunked prefill takes at most half the budget while others wait, and the waiting
    short prompt starts in the same step."""
    scheduler = make(num_blocks=400, caching=False, max_num_batched_tokens=64)
    long = make_seq(list(range(500)), max_tokens=4)
    scheduler.add(long)
    first = scheduler.schedule()
    assert [s.num_new_tokens for s in first.scheduled] == [64]       # alone: the whole budget
    scheduler.after_step(first)
    short = make_seq([1, 2, 3], max_tokens=4)
    scheduler.add(short)
    second = scheduler.schedule()
    sizes = {id(s.seq): s.num_new_tokens for s in second.scheduled}
    assert sizes[id(long)] == 32 and sizes[id(short)] == 3
