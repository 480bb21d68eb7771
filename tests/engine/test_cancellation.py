"""SPEC §2: cancellation is applied between engine steps. The token computed in the step in flight when
the cancel arrives is delivered once or not at all, nothing computed after it is delivered, and the
sequence's blocks come back at once while its neighbour runs on undisturbed.

Each test cancels from inside a real model step (a wrapper around the runner), so the step is truly in
flight; the async test cancels from the event loop while the engine thread is held inside the step.
"""
import asyncio
import threading

import pytest

from haltwise.config import EngineConfig
from haltwise.engine.async_engine import AsyncEngine
from haltwise.engine.factory import build_engine
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.termination import Reason

# Seeded sampling (varied ids), eos ignored: only the cancel or max_tokens can end these requests.
PARAMS = SamplingParams(temperature=1.0, seed=5, max_tokens=40, ignore_eos=True,
                        repetition_detection=RepetitionDetection(enabled=False))
NEIGHBOUR = SamplingParams(temperature=1.0, seed=9, max_tokens=12, ignore_eos=True,
                           repetition_detection=RepetitionDetection(enabled=False))


class CancelInFlight:
    """Runs `cancel()` inside model step number `at` (1-based), before the model computes that step."""

    def __init__(self, runner, at: int, cancel):
        self.runner, self.at, self.cancel, self.steps = runner, at, cancel, 0

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def execute(self, rows):
        self.steps += 1
        if self.steps == self.at:
            self.cancel()
        return self.runner.execute(rows)


def output_count(engine, request_id: str) -> int:
    return engine.requests[request_id].seqs[0].seq.num_output_tokens


@pytest.mark.parametrize("at", [1, 2, 7])
def test_abort_during_a_step_delivers_its_token_once_and_nothing_after(at):
    engine = build_engine(engine_config=EngineConfig(kv_cache_memory=4 * 2**20), tiny=True)
    engine.add_request("x", engine.tokenizer.encode("Hello " * 20), PARAMS)   # 2+ blocks
    engine.add_request("y", engine.tokenizer.encode("World"), NEIGHBOUR)
    before: dict[str, int] = {}

    def cancel():
        before["tokens"] = output_count(engine, "x")       # tokens that existed before the step in flight
        engine.abort("x")

    engine.runner = CancelInFlight(engine.runner, at, cancel)
    delivered: dict[str, list[int]] = {"x": [], "y": []}
    final = {}
    cancel_step_blocks = None
    while engine.has_unfinished():
        for update in engine.step():
            assert update.request_id not in final          # nothing after the final update
            delivered[update.request_id] += update.outputs[0].delta_token_ids
            if update.finished:
                final[update.request_id] = update
                if update.request_id == "x":
                    held = sum(len(s.block_table) for s in engine.scheduler.running)
                    cancel_step_blocks = engine.allocator.num_used_blocks, held
    x = final["x"].outputs[0]
    assert x.termination.reason is Reason.CANCELLED
    assert before["tokens"] == at - 1                        # one token per step: the cancel came in step `at`
    assert delivered["x"] == x.token_ids                     # every token once, in order: exactly the record
    assert len(x.token_ids) in (before["tokens"], before["tokens"] + 1)   # the in-flight token once or never
    used, held = cancel_step_blocks
    assert used == held > 0                                  # x's blocks came back in the cancel step; y's stay
    y = final["y"].outputs[0]
    assert y.termination.reason is Reason.MAX_TOKENS and delivered["y"] == y.token_ids and len(y.token_ids) == 12
    assert engine.allocator.num_used_blocks == 0


def test_async_cancel_while_the_engine_thread_is_inside_a_step():
    served = AsyncEngine.build(engine_config=EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=256), tiny=True)
    in_step, go = threading.Event(), threading.Event()
    counted: dict[str, int] = {}
    at = 4

    def hold():                         # engine thread: step `at` waits until the event loop has cancelled
        counted["before"] = output_count(served.engine, "x")
        in_step.set()
        assert go.wait(60), "the test never released the step"

    served.engine.runner = CancelInFlight(served.engine.runner, at, hold)

    async def scenario():
        await served.start()
        updates = []

        async def consume():
            async for update in served.generate("x", served.tokenizer.encode("Hello " * 20), PARAMS):
                assert not updates or not updates[-1].finished
                updates.append(update)

        consumer = asyncio.create_task(consume())
        assert await asyncio.to_thread(in_step.wait, 60)
        served.abort("x")
        go.set()
        await asyncio.wait_for(consumer, 60)
        await served.shutdown(grace=1.0)
        return updates, served.engine.allocator.num_used_blocks   # the engine thread has stopped

    updates, idle_blocks = asyncio.run(scenario())
    final = updates[-1].outputs[0]
    assert final.termination.reason is Reason.CANCELLED
    delivered = [t for u in updates for t in u.outputs[0].delta_token_ids]
    assert counted["before"] == at - 1
    assert delivered == final.token_ids
    assert len(delivered) in (counted["before"], counted["before"] + 1)
    assert idle_blocks == 0
