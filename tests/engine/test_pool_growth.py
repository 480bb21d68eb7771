"""The KV pool's blocks become usable as their pages are committed (engine/pool_growth.py): an engine
serves from the blocks committed so far, never hands out one whose pages are not, takes the rest as they
come, and ends its pool where the host refused a page."""
import pytest

from haltwise.config import EngineConfig
from haltwise.engine import page_commit
from haltwise.engine.engine import LLMEngine
from haltwise.engine.kv_cache import KVBudget, allocate_kv_caches
from haltwise.engine.page_commit import PageCommit, can_populate_later
from haltwise.errors import RequestTooLarge
from haltwise.models.tiny import tiny_llama
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.tokenizer.tiny import tiny_tokenizer
from tests.engine.test_page_commit import gated_madvise

gated = pytest.mark.skipif(not can_populate_later(), reason="MADV_POPULATE_WRITE is unavailable: "
                           "regions are populated when mapped, nothing commits later")
FIRST_ROUND_BLOCKS = 16
LONG = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True,
                      repetition_detection=RepetitionDetection(enabled=False))


def engine_over_a_gated_commit(monkeypatch, refuse: bool = False):
    """A tiny engine whose pool commits FIRST_ROUND_BLOCKS blocks (round 1: one call per region), then
    waits at the returned gate (or is refused the rest)."""
    config = EngineConfig(kv_cache_memory=32 * 2**20)
    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer.vocab_size)
    budget = KVBudget.of_engine(model.config, config, model.max_model_len)
    gate, _ = gated_madvise(monkeypatch, calls_before_gate=2 * model.config.num_layers, refuse=refuse)
    commit = PageCommit()
    caches = allocate_kv_caches(model.config, budget, config.kv_dtype, commit.zeros)
    monkeypatch.setattr(page_commit, "COMMIT_CHUNK_BYTES", caches[0][0][0].nbytes * FIRST_ROUND_BLOCKS)
    commit.start()
    commit.wait(rows=FIRST_ROUND_BLOCKS)
    engine = LLMEngine(model, model.config, tokenizer, config, model.max_model_len, kv_caches=caches,
                       kv_commit=commit)
    assert budget.num_blocks > 4 * FIRST_ROUND_BLOCKS
    return engine, gate


def held_block_ids(engine) -> set[int]:
    return {b for seq in engine.allocator._live.values() for b in seq.block_table}


@gated
def test_blocks_are_handed_out_only_once_committed_and_the_rest_arrive(monkeypatch):
    engine, gate = engine_over_a_gated_commit(monkeypatch)
    try:
        assert engine.allocator.num_usable_blocks == FIRST_ROUND_BLOCKS
        assert engine.allocator.num_free_blocks == FIRST_ROUND_BLOCKS and engine.allocator.num_used_blocks == 0
        assert engine.stats().kv_blocks_committed == FIRST_ROUND_BLOCKS
        # 400 + prompt tokens need 26 blocks of 16: more than are committed, fewer than the pool holds
        engine.add_request("long", engine.tokenizer.encode("Once upon a time"), LONG)
        for _ in range(30):
            engine.step()
            assert max(held_block_ids(engine), default=0) < FIRST_ROUND_BLOCKS
        assert engine.has_unfinished()
    finally:
        gate.set()
    final = None
    while engine.has_unfinished():
        final = next((u for u in engine.step() if u.finished), final)
    assert final.outputs[0].finish_reason == "length" and len(final.outputs[0].token_ids) == 400
    if engine.pool_growth is not None:      # the rest commits once the engine is idle (may_commit)
        engine.pool_growth.commit.wait()
        engine.step()
    assert engine.pool_growth is None and engine.allocator.num_usable_blocks == engine.allocator.num_blocks
    assert engine.stats().kv_blocks_committed == engine.stats().kv_blocks_total


@gated
def test_a_refused_commit_ends_the_pool_where_the_host_stopped(monkeypatch):
    engine, _ = engine_over_a_gated_commit(monkeypatch, refuse=True)
    engine.step()
    assert engine.pool_growth is None
    assert engine.allocator.num_blocks == FIRST_ROUND_BLOCKS == engine.scheduler.policy.num_blocks
    with pytest.raises(RequestTooLarge, match=f"{FIRST_ROUND_BLOCKS} blocks"):
        engine.add_request("long", engine.tokenizer.encode("Once upon a time"), LONG)
    params = SamplingParams(temperature=0.0, max_tokens=100, ignore_eos=True)
    engine.add_request("fits", engine.tokenizer.encode("Once upon a time"), params)
    while engine.has_unfinished():
        engine.step()


@pytest.mark.parametrize("kv_cache_memory", [256 * 2**10, 3 * 2**20])
def test_a_pool_with_nothing_left_to_commit_is_usable_whole(kv_cache_memory):
    """A pool under SMALL_BYTES per region comes from torch.zeros (and, where madvise cannot populate, every
    region is populated when mapped): the commit has no rows to count, and every block is usable at once."""
    config = EngineConfig(kv_cache_memory=kv_cache_memory)
    tokenizer = tiny_tokenizer()
    model = tiny_llama(tokenizer.vocab_size)
    commit = PageCommit()
    caches = allocate_kv_caches(model.config, KVBudget.of_engine(model.config, config, model.max_model_len),
                                config.kv_dtype, commit.zeros)
    commit.start()
    engine = LLMEngine(model, model.config, tokenizer, config, model.max_model_len, kv_caches=caches,
                       kv_commit=commit)
    assert engine.allocator.num_usable_blocks == engine.allocator.num_blocks > 0
    engine.add_request("r", engine.tokenizer.encode("Once upon a time"), SamplingParams(temperature=0.0, max_tokens=8))
    for _ in range(100):
        if not engine.has_unfinished():
            break
        engine.step()
    assert not engine.has_unfinished(), "the request never ran: no block was usable"


@gated
def test_the_commit_goes_on_only_while_idle_or_short_of_free_blocks(monkeypatch):
    engine, gate = engine_over_a_gated_commit(monkeypatch)
    growth = engine.pool_growth
    try:
        assert growth.may_commit()                                      # idle
        engine.add_request("a", engine.tokenizer.encode("Once upon a time"), LONG)
        engine.step()
        assert engine.scheduler.num_running == 1 and not engine.scheduler.num_waiting
        growth.reserve_blocks = engine.allocator.num_free_blocks
        assert not growth.may_commit()                                  # running, the reserve is free
        growth.reserve_blocks += 1
        assert growth.may_commit()                                      # running, short of the reserve
    finally:
        gate.set()
        growth.commit.wait()             # done before the next test patches madvise (no thread outlives it)
