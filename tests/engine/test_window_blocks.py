"""The sliding layers' own KV pool (engine/window_blocks.py): the blocks it hands out, the bound that keeps it
from running dry, and an engine whose sliding layers keep only their window computing exactly what one that
keeps every position computes (Python layers and the native stack, chunked prefill, speculation, preemption)."""
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.config import EngineConfig
from haltwise.engine.engine import LLMEngine
from haltwise.engine.factory import _plan
from haltwise.engine.window_blocks import WindowBlocks, window_pool_blocks
from haltwise.models.tiny import tiny_config, tiny_llama
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.tokenizer.tiny import tiny_tokenizer

WINDOW, BLOCK = 8, 4
SLIDING = dict(sliding_window=WINDOW, num_layers=3,
               layer_types=("sliding_attention", "sliding_attention", "full_attention"))


def test_a_step_holds_exactly_the_blocks_its_queries_see():
    pool = WindowBlocks(num_blocks=10, block_size=BLOCK, window=WINDOW)
    table = pool.table(seq_id=1, start=0, end=14)           # a prompt chunk: every position is written
    assert len(table) == 4 and len(set(table)) == 4 and pool.num_free_blocks == 6
    pool.release_behind(1, 14)       # the next query (position 14) sees 7..14: block 0 (0..3) goes, block 1 stays
    assert pool.num_held(1) == 3 and pool.num_free_blocks == 7
    table = pool.table(1, start=14, end=17)                  # positions 14..16: a decode and two drafts
    assert table[0] == 0 and not pool.holds(1, 0)            # a given-back block reads block 0
    assert pool.num_held(1) == 4 and all(pool.holds(1, i) for i in (1, 2, 3, 4))
    pool.trim(1, 15)                                         # the drafts were rejected: block 4 (16..) goes back
    assert pool.num_held(1) == 3
    pool.free(1)
    assert pool.num_free_blocks == 10 and pool.num_held(1) == 0


def test_window_pool_blocks_only_for_a_model_that_mixes_sliding_and_full_layers():
    engine = EngineConfig(block_size=BLOCK, max_num_seqs=4, max_num_batched_tokens=16)
    mixed = tiny_config(97, **SLIDING)
    assert window_pool_blocks(mixed, engine, max_model_len=64) == 4 * (WINDOW // BLOCK + 2) + 16 // BLOCK
    assert window_pool_blocks(mixed, EngineConfig(block_size=BLOCK, swa_full=True), 64) == 0
    assert window_pool_blocks(mixed, engine, max_model_len=WINDOW) == 0          # the window covers everything
    every = tiny_config(97, sliding_window=WINDOW, layer_types=("sliding_attention",) * 2)
    assert window_pool_blocks(every, engine, 64) == 0                              # nothing would be saved
    assert window_pool_blocks(tiny_config(97), engine, 64) == 0


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_pool_never_runs_dry_and_never_hands_a_block_to_two_sequences(data):
    """A scheduler-shaped run: up to max_running sequences, each step's tokens within the step budget,
    sequences ending and starting at random. With window_pool_blocks() blocks the pool always has what a step
    asks, no block is held twice, and every position a query of the step can see is in a held block."""
    window = data.draw(st.integers(1, 40), label="window")
    block = data.draw(st.sampled_from([1, 2, 4, 16]), label="block")
    running_max = data.draw(st.integers(1, 6), label="max_running")
    budget = data.draw(st.integers(running_max, 64), label="step budget")
    config = tiny_config(97, sliding_window=window, num_layers=2, max_position_embeddings=4096,
                         layer_types=("sliding_attention", "full_attention"))
    engine = EngineConfig(block_size=block, max_num_seqs=running_max, max_num_batched_tokens=budget)
    num_blocks = window_pool_blocks(config, engine, max_model_len=4096)
    pool = WindowBlocks(num_blocks, block, window)
    computed: dict[int, int] = {}
    next_id = 0
    for _ in range(data.draw(st.integers(1, 30), label="steps")):
        while len(computed) < running_max and data.draw(st.booleans()):
            computed[next_id], next_id = 0, next_id + 1
        left, step = budget, {}
        for seq_id in list(computed):
            n = data.draw(st.integers(0, min(left, 3 * window + 5)))
            if n:
                step[seq_id], left = n, left - n
        for seq_id, n in step.items():
            start = computed[seq_id]
            for p in range(max(0, start - window + 1), start):     # computed earlier: still held
                assert pool.holds(seq_id, p // block), (p, start)
            pool.table(seq_id, start, start + n)
            for p in range(max(0, start - window + 1), start + n):
                assert pool.holds(seq_id, p // block), p
        held = [b for seq_id, t in pool._tables.items() for i, b in enumerate(t) if pool.holds(seq_id, i)]
        assert len(held) == len(set(held)) and len(held) + pool.num_free_blocks == num_blocks
        for seq_id, n in step.items():
            computed[seq_id] += n
            pool.release_behind(seq_id, computed[seq_id])
        for seq_id in list(computed):
            if data.draw(st.integers(0, 4)) == 0:
                pool.free(seq_id)
                del computed[seq_id]


def _engine(dtype: str, swa_full: bool, memory: int) -> LLMEngine:
    tokenizer = tiny_tokenizer()
    net = tiny_llama(tokenizer.vocab_size, seed=3, max_model_len=128, **SLIDING)
    config = EngineConfig(dtype=dtype, block_size=BLOCK, kv_cache_memory=memory, max_model_len=128, max_num_seqs=4,
                          max_num_batched_tokens=16, long_prefill_chunk=8, swa_full=swa_full,
                          enable_prefix_caching=False, speculative_max_batch=None)   # drafts beside others too
    if dtype == "auto":
        _plan(net, None, config, tokenizer)
    return LLMEngine(net, net.config, tokenizer, config, 128)


def _generate(engine: LLMEngine) -> list[tuple[list[int], list[float]]]:
    # Seeded sampling with logprobs: the tiny random model repeats one id under greedy, and a logprob
    # carries every bit of the logits it came from.
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=40, logprobs=0, ignore_eos=True,
                            repetition_detection=RepetitionDetection(enabled=False))
    prompts = [torch.randint(10, 250, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (37, 21, 9, 50)]
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, params)
    final = {}
    while engine.has_unfinished():
        for update in engine.step():
            if update.finished:
                final[update.request_id] = update.outputs[0]
    return [(final[f"r{i}"].token_ids, [lp.logprob for lp in final[f"r{i}"].logprobs]) for i in range(len(prompts))]


@pytest.mark.parametrize("dtype", ["float32", "auto"])
def test_sliding_layers_keeping_only_their_window_compute_what_keeping_every_position_computes(monkeypatch, dtype):
    """Prompts of 1-6 windows, prefilled in 8-token chunks beside decodes (and speculative drafts under
    dtype auto): tokens and logprobs equal bit for bit; the sliding layers' caches hold only their pool's
    blocks, all given back at the end. Fault "release_behind keeps one window position too few" (the first
    block a query sees given back) changes the tokens."""
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    full = _engine(dtype, swa_full=True, memory=4 * 2**20)
    windowed = _engine(dtype, swa_full=False, memory=4 * 2**20)
    pool = windowed.allocator.window
    assert full.allocator.window is None and pool is not None and pool.num_blocks == windowed.budget.window_blocks
    caches = [k.shape[0] for k, _ in windowed.runner.kv_caches]
    assert caches == [pool.num_blocks, pool.num_blocks, windowed.budget.num_blocks] and caches[0] < caches[2]
    assert _generate(windowed) == _generate(full)
    assert pool.num_free_blocks == pool.num_blocks


def test_the_window_pool_holds_through_preemption_on_the_batch_invariant_path(monkeypatch):
    """A main pool too small for the four sequences preempts and recomputes; under dtype auto (one
    batch-invariant routine per token) the outputs still equal an unpressed engine keeping every position."""
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    small = _engine("auto", swa_full=False, memory=4 * 2**20)
    small = _engine("auto", swa_full=False, memory=small.budget.window_bytes + 40 * BLOCK * small.budget.bytes_per_token)
    assert small.budget.num_blocks == 40
    outputs = _generate(small)
    assert small.scheduler.num_preemptions > 0
    assert outputs == _generate(_engine("auto", swa_full=True, memory=4 * 2**20))


@pytest.mark.slow
def test_gemma3_default_flags_keep_only_the_window_and_the_same_tokens():
    """Real Gemma 3 270M under default flags: prompts of 700-1500 tokens (the 512-token window slides over
    them) give the tokens --swa-full gives, from a KV pool whose sliding layers hold ~1/6 of the bytes."""
    from haltwise.engine.factory import build_engine
    from tests.models.real_models import real_model_path

    text = (Path(__file__).parents[3] / "shared" / "data" / "longtext" / "tempest_gut.txt").read_text()
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True,
                            repetition_detection=RepetitionDetection(enabled=False))
    outputs = []
    for swa_full in (False, True):
        engine = build_engine(real_model_path("gemma3-270m"),
                              EngineConfig(dtype="auto", kv_cache_memory=256 * 2**20, max_model_len=4096,
                                           max_num_seqs=8, swa_full=swa_full))
        assert (engine.allocator.window is None) == swa_full
        ids = engine.tokenizer.encode(text)[:1500]
        for i, prompt in enumerate((ids, ids[:700], ids[300:1300])):
            engine.add_request(f"r{i}", prompt, params)
        final = {}
        while engine.has_unfinished():
            final.update((u.request_id, u.outputs[0].token_ids) for u in engine.step() if u.finished)
        outputs.append(final)
        del engine
    assert outputs[0] == outputs[1]
