"""Scheduler admission and cleanup: the watermark, requests that can never fit, a full queue, aborts.

Outputs come from the fake runner in scheduler_harness.py and are compared to a direct reference.
"""
from __future__ import annotations

import pytest

from haltwise.config import EngineConfig
from haltwise.engine.admission import AdmissionError
from haltwise.engine.block_allocator import BlockAllocator
from haltwise.engine.scheduler import Scheduler
from haltwise.engine.sequence import SequenceStatus
from haltwise.stopping.termination import Reason, Termination
from tests.engine.scheduler_harness import WINDOW, FakeRunner, assert_all_free, make, make_seq, reference


def test_watermark_holds_back_a_request_whose_need_does_not_fit() -> None:
    # 10 blocks of 4, watermark 0.9 -> 9 blocks. Each prompt holds 3 blocks and needs (12 + 4) / 4 = 4.
    sched = make(num_blocks=10, block_size=4, max_num_batched_tokens=64)
    a, b, c = (make_seq([i] * 12, max_tokens=4) for i in (1, 2, 3))
    for seq in (a, b, c):
        sched.add(seq)
    runner = FakeRunner(sched)
    runner.step()
    # a starts (nothing running); b: 3 used + 4 <= 9; c: 6 used + 4 > 9 -> waits
    assert [s.seq for s in runner.steps[0].scheduled] == [a, b]
    assert sched.waiting == (c,)
    runner.run()
    assert all(s.output_token_ids == reference(s.prompt_token_ids, 4) for s in (a, b, c))
    assert_all_free(sched)


def test_admission_rejects_what_can_never_fit() -> None:
    sched = make(num_blocks=8, block_size=4)  # 32 tokens of KV
    with pytest.raises(AdmissionError) as err:
        sched.add(make_seq([1] * 20, max_tokens=13))
    assert err.value.kind == "too_large" and "33 tokens" in err.value.message
    assert err.value.retry_after is None
    with pytest.raises(AdmissionError) as err:
        sched.add(make_seq([1] * 4, max_tokens=None))  # the rest of the 4096 window
    assert err.value.kind == "too_large"
    with pytest.raises(AdmissionError) as err:
        sched.add(make_seq([1] * WINDOW, max_tokens=1))
    assert err.value.kind == "too_large" and "window" in err.value.message
    sched.add(make_seq([1] * 20, max_tokens=12))  # exactly the pool
    assert sched.num_waiting == 1


def test_admission_rejects_at_once_when_the_queue_is_full() -> None:
    sched = make(max_queue=2)
    sched.add(make_seq([1, 2]))
    sched.add(make_seq([1, 2]))
    with pytest.raises(AdmissionError) as err:
        sched.add(make_seq([1, 2]))
    assert err.value.kind == "queue_full" and err.value.retry_after == 1.0   # the scheduler's default
    assert sched.num_waiting == 2
    with pytest.raises(AdmissionError):
        sched.add_group([make_seq([3]), make_seq([3])])
    assert sched.num_waiting == 2  # all or nothing
    FakeRunner(sched).step()  # both start -> queue has room again
    sched.add_group([make_seq([3]), make_seq([3])])
    assert sched.num_waiting == 2


def test_abort_frees_blocks_at_once_and_finish_is_once() -> None:
    sched = make()
    a = make_seq([1] * 9, max_tokens=20, request_id="A")
    a2 = make_seq([1] * 9, max_tokens=20, request_id="A")
    b = make_seq([2] * 9, max_tokens=3, request_id="B")
    for seq in (a, a2, b):
        sched.add(seq)
    runner = FakeRunner(sched)
    runner.step()
    tables = {name: list(seq.block_table) for name, seq in (("a", a), ("a2", a2), ("b", b))}
    assert sched.allocator.num_used_blocks == len(set().union(*tables.values())) and len(tables["a"]) == 3
    removed = sched.abort("A")
    assert set(map(id, removed)) == {id(a), id(a2)} and sched.running == (b,)
    assert sched.allocator.num_used_blocks == len(tables["b"])     # exactly A's blocks are back, at once
    assert sched.allocator.num_live_seqs == 1
    for seq in removed:
        sched.finish(seq, Termination(Reason.CANCELLED))
        sched.finish(seq, Termination(Reason.TIMEOUT))  # second finish is ignored
        assert seq.termination.reason == Reason.CANCELLED and seq.is_finished
    assert sched.abort("A") == []
    runner.run()
    assert b.output_token_ids == reference([2] * 9, 3)
    assert_all_free(sched)


def test_add_group_is_all_or_nothing_at_the_queue_boundary_and_its_sequences_run() -> None:
    full = make(max_queue=3)
    full.add(make_seq([1, 2]))
    full.add(make_seq([1, 2]))
    with pytest.raises(AdmissionError):
        full.add_group([make_seq([3]), make_seq([3])])     # 2 waiting + 2 > 3
    assert full.num_waiting == 2
    sched = make(max_queue=3)
    alone = make_seq([1, 2], max_tokens=2)
    sched.add(alone)
    group = [make_seq([4, 5], max_tokens=3, request_id="g") for _ in range(2)]
    sched.add_group(group)                                  # 1 waiting + 2 == 3: fits exactly
    assert sched.waiting == (alone, *group) and all(s.status is SequenceStatus.WAITING for s in group)
    FakeRunner(sched).run()
    assert [s.output_token_ids for s in group] == [reference([4, 5], 3)] * 2
    assert_all_free(sched)


def test_a_sequence_finished_while_the_step_ran_does_not_stop_the_others_advancing() -> None:
    sched = make()
    gone, stays = make_seq([1] * 5, request_id="gone"), make_seq([2] * 6, request_id="stays")
    sched.add(gone)
    sched.add(stays)
    out = sched.schedule()
    assert [s.seq for s in out.scheduled] == [gone, stays]
    for seq in sched.abort("gone"):                  # aborted between schedule and after_step
        sched.finish(seq, Termination(Reason.CANCELLED))
    sched.after_step(out)
    assert (gone.num_computed_tokens, stays.num_computed_tokens) == (0, 6)


def test_a_full_queue_suggests_the_configured_retry_after() -> None:
    sched = Scheduler(EngineConfig(max_queue=1), BlockAllocator(64, 4), max_model_len=WINDOW, retry_after=2.5)
    sched.add(make_seq([1, 2]))
    with pytest.raises(AdmissionError) as err:
        sched.add(make_seq([1, 2]))
    assert err.value.retry_after == 2.5
