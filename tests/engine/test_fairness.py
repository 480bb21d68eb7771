"""Fair starts (engine/fairness.py): one request's many sequences cannot keep another request waiting.

Outputs come from the fake runner in scheduler_harness.py and are compared to a direct reference, so a
displaced (preempted) sequence that resumes wrongly changes its tokens.
"""
from __future__ import annotations

from haltwise.engine.sequence import SequenceStatus
from tests.engine.scheduler_harness import FakeRunner, assert_all_free, make, make_seq, reference


def test_a_newcomer_starts_at_the_next_step_while_a_big_request_fills_every_slot() -> None:
    sched = make(num_blocks=256, block_size=4, max_num_seqs=8)
    big = [make_seq([5, i], max_tokens=40, request_id="big") for i in range(32)]
    sched.add_group(big)
    runner = FakeRunner(sched)
    runner.step()
    assert sched.num_running == 8 and sched.num_waiting == 24
    small = make_seq([9, 9, 9], max_tokens=1, request_id="small")
    sched.add(small)
    out = runner.step()
    assert small in [s.seq for s in out.scheduled], "the newcomer waited behind the big request's queue"
    assert small.status == SequenceStatus.FINISHED and small.output_token_ids == reference([9, 9, 9], 1)
    assert [s.request_id for s in out.preempted] == ["big"]   # it took the latest big sequence's slot
    runner.run()
    for seq in big:
        assert seq.output_token_ids == reference(seq.prompt_token_ids, 40)
    assert_all_free(sched)


def test_waiting_requests_start_in_turn_not_first_come_first_served() -> None:
    sched = make(num_blocks=256, block_size=4, max_num_seqs=4)
    a = [make_seq([1, i], max_tokens=3, request_id="a") for i in range(4)]
    b = [make_seq([2, i], max_tokens=3, request_id="b") for i in range(4)]
    sched.add_group(a)
    sched.add_group(b)
    out = FakeRunner(sched).step()
    assert [s.seq.request_id for s in out.scheduled] == ["a", "b", "a", "b"]


def test_one_sequence_per_request_is_first_come_first_served() -> None:
    sched = make(num_blocks=256, block_size=4, max_num_seqs=3)
    seqs = [make_seq([7, i], max_tokens=2) for i in range(6)]
    for seq in seqs:
        sched.add(seq)
    runner = FakeRunner(sched)
    assert [s.seq for s in runner.step().scheduled] == seqs[:3]
    assert not runner.steps[-1].preempted
    runner.run()
    assert_all_free(sched)


def test_displacement_never_takes_a_request_down_to_nothing() -> None:
    # Memory (not slots) is what is short: 3 requests each running one sequence fill the pool.
    sched = make(num_blocks=6, block_size=4, watermark=1.0, caching=False, max_num_seqs=8)
    first = [make_seq([3] * 7, max_tokens=4) for _ in range(3)]
    for seq in first:
        sched.add(seq)
    runner = FakeRunner(sched)
    runner.step()
    late = make_seq([4] * 7, max_tokens=1)
    sched.add(late)
    assert not runner.step().preempted   # nobody runs two: nothing is displaced, late waits its turn
    runner.run()
    assert late.output_token_ids == reference([4] * 7, 1)
    assert_all_free(sched)
