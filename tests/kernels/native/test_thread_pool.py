"""The native work-sharing pool (csrc/thread_pool.h) that replaced at::parallel_for.

* Bit for bit: every linear format and the whole decode stack give exactly at::parallel_for's numbers,
  at every thread count (each output is computed by one task with a fixed reduction order, so neither
  the thread that ran it nor the chunk boundaries can change it).
* A worker the scheduler leaves out does not hold a call up: with worker 1 parked (the test hook makes
  it sleep when woken for a job, before it claims anything, as a descheduled thread would), calls
  still return, while it is still parked, with every chunk run by the caller and the right numbers.
  A barrier-style pool (at::parallel_for's OpenMP team) would not return until the worker arrived.
* A worker descheduled inside a chunk is waited for (its chunk must finish), and the pool notes the
  late worker: the following calls run on the caller alone for a while (20 ms), and for twice as long
  each time the worker is late again within four spells of its end (a neighbour that stays), back to
  20 ms once that long has passed without it.
"""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import SUPPORTED
from haltwise.kernels.native.repack import X8, repack_x8
from haltwise.models.native_decode import NativeDecode
from tests.kernels.native.blocks import random_blocks

native = build.load()
pytestmark = pytest.mark.skipif(native is None, reason=f"native kernels unavailable: {build.failure()}")
THREADS = [1, 2, 3, 4]


@pytest.fixture
def threads():
    """Sets torch's thread count (the pool follows it) and the pool's mode; restores both after."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)
    native.set_threads(0)
    native._pool_use_torch(False)
    native._pool_hold(0)


# Activation rows that give a (768, 256) linear several chunks of kMinChunkWork (thread_pool.h) multiply-adds.
BUSY_ROWS = 32


def _gemm_case(qtype: Q, seed: int, rows=(200, 72, 40), m: int = 3):
    rng = np.random.default_rng(seed)
    parts = [random_blocks(qtype, n, 256, rng) for n in rows]
    if qtype in X8:
        weights = [repack_x8(d, qtype) for d, _ in parts]
        shards, qtypes = [torch.from_numpy(p) for p, _ in weights], [c for _, c in weights]
    else:
        shards, qtypes = [torch.from_numpy(d) for d, _ in parts], [int(qtype)] * len(rows)
    x = torch.from_numpy(rng.standard_normal((m, 256)).astype(np.float32))
    return lambda: native.gemm(shards, qtypes, list(rows), x)


def _both(run, n: int, threads) -> tuple[torch.Tensor, torch.Tensor]:
    """run() under the pool and under at::parallel_for, n threads each."""
    threads(n)
    native._pool_use_torch(True)
    reference = run()
    native._pool_use_torch(False)
    return run(), reference


@pytest.mark.parametrize("qtype", list(SUPPORTED) + list(X8), ids=lambda q: q.name)
def test_linears_equal_parallel_for_bit_for_bit(qtype: Q, threads) -> None:
    for m in (1, 5, 33, 130):   # 33 rows: the activation quantization is split too; 130: the rows in ~10 chunks
        run = _gemm_case(qtype, seed=m, m=m)
        for n in THREADS:
            ours, reference = _both(run, n, threads)
            assert torch.equal(ours, reference), f"{qtype.name} m={m} threads={n}"


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_decode_stack_equals_parallel_for_bit_for_bit(tmp_path, family, threads, monkeypatch) -> None:
    from tests.models.test_native_decode import decode_logits, planned_model

    monkeypatch.setenv("HALTWISE_WEIGHT_CACHE", "0")
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    model = planned_model(tmp_path, family, Q.Q8_0)
    stack, why = NativeDecode.build(model.model)
    assert stack is not None, why
    for n in THREADS:
        ours, reference = _both(lambda: decode_logits(model, stack), n, threads)
        for step, (a, b) in enumerate(zip(ours, reference)):
            assert torch.equal(a, b), f"{family} threads={n} step {step}"


def test_pool_follows_torch_threads_unless_set(threads) -> None:
    threads(3)
    assert native.threads() == 3
    native.set_threads(2)
    assert native.threads() == 2
    native.set_threads(0)
    threads(1)
    assert native.threads() == 1


def test_a_parked_worker_does_not_hold_up_the_call(threads) -> None:
    run = _gemm_case(Q.Q4_0, seed=7, rows=(512, 256), m=BUSY_ROWS)
    threads(1)
    expected = run()
    threads(2)
    native._pool_hold(1)
    deadline = time.monotonic() + 10
    while not native._pool_held():         # a call wakes worker 1, which parks before claiming
        assert time.monotonic() < deadline, "worker 1 never woke for a job"
        run()
        time.sleep(0.001)
    for _ in range(3):
        y = run()
        assert native._pool_held(), "the call waited for the parked worker"
        assert torch.equal(y, expected)
    assert native._pool_chunks_run(1) == 0 and native._pool_chunks_run(0) > 0
    native._pool_hold(0)
    while native._pool_held():
        time.sleep(0.001)
    assert torch.equal(run(), expected)    # the worker rejoins: later calls still right


def test_a_small_linear_runs_on_the_caller_alone(threads) -> None:
    """A 1-row (312, 256) linear is ~80k multiply-adds, under one chunk's minimum: never handed out."""
    run = _gemm_case(Q.Q4_0, seed=5, m=1)
    threads(2)
    native._pool_hold(0)                   # resets the per-thread chunk counts
    for _ in range(50):
        run()
    assert native._pool_chunks_run(1) == 0 and native._pool_chunks_run(0) == 0   # inline: no chunk claimed


def test_a_worker_late_inside_a_chunk_is_waited_for_and_noted(threads) -> None:
    run = _gemm_case(Q.Q8_0, seed=3, rows=(512, 256), m=BUSY_ROWS)
    threads(1)
    expected = run()
    threads(2)
    native._pool_hold(2)                   # worker 1 sleeps 100 ms inside each chunk it claims
    before = native._pool_late_events()
    results = [run() for _ in range(20)]
    claimed = native._pool_chunks_run(1)
    native._pool_hold(0)
    assert all(torch.equal(y, expected) for y in results)
    if claimed:                            # the worker got a chunk (the caller may have taken them all)
        assert native._pool_late_events() > before


def _late_events_while_held(run, count: int, limit_s: float = 5.0) -> list[float]:
    """Calls back to back with worker 1 parked 100 ms inside each chunk it claims; the caller-alone spell
    (ms) after each of the first `count` late events."""
    native._pool_hold(2)
    spells, seen, deadline = [], native._pool_late_events(), time.monotonic() + limit_s
    while len(spells) < count and time.monotonic() < deadline:
        run()
        if native._pool_late_events() > seen:
            seen = native._pool_late_events()
            spells.append(native._pool_solo_ms())
    native._pool_hold(0)
    return spells


def test_a_worker_late_again_after_its_spell_doubles_the_next_spell(threads) -> None:
    run = _gemm_case(Q.Q8_0, seed=3, rows=(512, 256), m=BUSY_ROWS)
    threads(2)
    time.sleep(1.5)                        # past the longest spell (320 ms): the first is 20 ms
    spells = _late_events_while_held(run, 3)
    assert spells == [20.0, 40.0, 80.0]
    time.sleep(1.5)                        # as long again without a late worker: the neighbour has gone
    assert _late_events_while_held(run, 1) == [20.0]


def test_a_worker_late_again_only_after_a_pause_starts_over_at_the_first_spell(threads) -> None:
    """A neighbour in bursts (late again tens of ms after a spell) is no busy loop: its spells stay short."""
    run = _gemm_case(Q.Q8_0, seed=3, rows=(512, 256), m=BUSY_ROWS)
    threads(2)
    time.sleep(1.5)                        # past the longest spell (320 ms): the first is 20 ms
    assert _late_events_while_held(run, 1) == [20.0]
    time.sleep(0.06)                       # the 20 ms spell ends, then 40 ms more without a late worker
    assert _late_events_while_held(run, 1) == [20.0]
