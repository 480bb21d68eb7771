"""The router's prompt block keys are exactly the allocator's prefix-cache hashes (no ray needed)."""
from __future__ import annotations

from haltwise.cluster.prefix import block_key, prompt_block_keys
from haltwise.engine.block_allocator import BlockAllocator
from haltwise.engine.sequence import Sequence
from haltwise.sampling_params import SamplingParams


def _cached_keys(prompt: list[int], block_size: int) -> list[int]:
    alloc = BlockAllocator(64, block_size)
    seq = Sequence(seq_id=0, request_id="r", prompt_token_ids=prompt, params=SamplingParams(max_tokens=4),
                   max_total_tokens=4096)
    alloc.allocate_prompt(seq)
    seq.num_computed_tokens = seq.num_tokens
    alloc.on_computed(seq)
    return [block_key(h) for h in alloc.cached_block_hashes()]


def test_keys_match_what_the_allocator_caches() -> None:
    prompt = [(7 * i) % 50 for i in range(53)]  # 3 full blocks of 16, and 5 tokens
    keys = prompt_block_keys(prompt, 16)
    assert len(keys) == 3
    assert sorted(keys) == sorted(_cached_keys(prompt, 16))


def test_the_last_token_is_never_a_cached_block() -> None:
    assert prompt_block_keys(list(range(16)), 16) == []        # the allocator recomputes token 16
    assert len(prompt_block_keys(list(range(17)), 16)) == 1
    assert prompt_block_keys([], 16) == []


def test_keys_chain_over_the_whole_prefix() -> None:
    a = prompt_block_keys([1] * 16 + [2] * 16 + [3], 16)
    b = prompt_block_keys([9] * 16 + [2] * 16 + [3], 16)
    assert a[0] != b[0] and a[1] != b[1]  # same second block, different prefix: different key
