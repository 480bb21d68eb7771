"""Priority scheduling (engine/priority.py), counted in scheduler steps with the fake runner: urgent requests
start at once under saturation, the least urgent is preempted, aging ends starvation, per-client fairness
holds among equals, and every output still equals the direct reference (preemption resumes exactly)."""
from __future__ import annotations

from dataclasses import replace

from haltwise.engine.sequence import SequenceStatus
from tests.engine.scheduler_harness import FakeRunner, assert_all_free, make, make_seq, reference


def seq(prompt, max_tokens, priority, rid=None):
    s = make_seq(prompt, max_tokens, rid)
    s.params = replace(s.params, priority=priority)
    return s


def saturated(aging: int = 64, **cfg):
    return make(num_blocks=256, block_size=4, max_num_seqs=2, scheduling_policy="priority",
                priority_aging_steps=aging, **cfg)


def test_an_urgent_request_starts_at_the_next_step_and_the_least_urgent_is_preempted() -> None:
    sched = saturated()
    low = [seq([1, i], 30, 5) for i in range(2)] + [seq([2, i], 30, 5) for i in range(4)]
    for s in low:
        sched.add(s)
    runner = FakeRunner(sched)
    for _ in range(3):
        runner.step()
    assert sched.num_running == 2 and sched.num_waiting == 4
    urgent = seq([9, 9], 3, 0)
    sched.add(urgent)
    out = runner.step()
    assert urgent in [s.seq for s in out.scheduled], "the urgent request waited behind low-priority ones"
    assert [s.priority for s in (p.params for p in out.preempted)] == [5]
    runner.run()
    assert urgent.output_token_ids == reference([9, 9], 3)
    for s in low:
        assert s.output_token_ids == reference(s.prompt_token_ids, 30)
    assert_all_free(sched)


def test_waiting_requests_start_by_priority_then_arrival() -> None:
    sched = make(num_blocks=256, block_size=4, max_num_seqs=1, scheduling_policy="priority")
    seqs = [seq([7, i], 2, p) for i, p in enumerate([3, 1, 2, 1, 0])]
    for s in seqs:
        sched.add(s)
    runner = FakeRunner(sched)
    started = []
    while sched.has_unfinished():
        runner.step()
        started += [s for s in sched.running if s not in started]
    assert [s.params.priority for s in started] == [0, 1, 1, 2, 3]
    assert started[1] is seqs[1] and started[2] is seqs[3]        # equal priority: arrival order


def test_aging_ends_starvation_under_a_stream_of_urgent_requests() -> None:
    """A priority-3 request behind a never-ending stream of priority-0 ones (a new one every step, more than
    the engine serves): with one level per 4 steps, after 12 steps no newcomer is more urgent, so it waits only
    for the ~12 that arrived before that, then runs to its end with the right tokens. Without aging it never
    starts."""
    def run(aging: int) -> tuple[int | None, bool]:
        sched = saturated(aging=aging)
        runner = FakeRunner(sched)
        sched.add(seq([5, 5], 4, 0))
        sched.add(seq([6, 6], 4, 0))
        runner.step()
        low = seq([3, 3, 3], 6, 3)
        sched.add(low)
        started = None
        for step in range(1, 200):
            sched.add(seq([8, step], 4, 0))
            runner.step()
            if started is None and low.status == SequenceStatus.RUNNING:
                started = step
            if low.status == SequenceStatus.FINISHED:
                break
        done = low.status == SequenceStatus.FINISHED
        assert not done or low.output_token_ids == reference([3, 3, 3], 6)
        return started, done

    started, done = run(aging=4)
    assert started is not None and started <= 60 and done, started
    never, _ = run(aging=10_000)          # without aging the stream starves it for the whole run
    assert never is None


def test_among_equal_priorities_per_client_fairness_holds() -> None:
    """The fairness.py guarantee, under the priority policy: a one-sequence newcomer does not wait behind the
    queued sequences of a big request of the same priority."""
    sched = make(num_blocks=256, block_size=4, max_num_seqs=8, scheduling_policy="priority")
    big = [seq([5, i], 20, 1, rid="big") for i in range(32)]
    sched.add_group(big)
    runner = FakeRunner(sched)
    runner.step()
    small = seq([9, 9, 9], 1, 1, rid="small")
    sched.add(small)
    out = runner.step()
    assert small in [s.seq for s in out.scheduled]
    runner.run()
    assert small.output_token_ids == reference([9, 9, 9], 1)
    assert all(s.output_token_ids == reference(s.prompt_token_ids, 20) for s in big)


def test_displacement_never_takes_a_slot_from_a_more_urgent_request() -> None:
    sched = make(num_blocks=256, block_size=4, max_num_seqs=2, scheduling_policy="priority")
    urgent = [seq([4, i], 10, 0, rid="urgent") for i in range(2)]
    sched.add_group(urgent)
    runner = FakeRunner(sched)
    runner.step()
    newcomer = seq([9, 9], 2, 5, rid="newcomer")
    sched.add(newcomer)
    out = runner.step()
    assert not out.preempted and newcomer.status == SequenceStatus.WAITING
    runner.run()
    assert_all_free(sched)
