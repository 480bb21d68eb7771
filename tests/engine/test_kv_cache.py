"""The KV pool sized to the host: auto = a share of available RAM; a max_model_len that cannot fit is refused."""
import pytest
import torch

from haltwise.config import KV_AUTO_FRACTION, KV_AUTO_MAX_FRACTION, EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.engine.kv_cache import KVBudget, auto_kv_memory, available_ram
from haltwise.models.tiny import tiny_config

GIB = 2**30


def test_auto_pool_is_a_share_of_available_ram():
    assert auto_kv_memory(46080, 16, 8192, 64, available=20 * GIB) == int(KV_AUTO_FRACTION * 20 * GIB)


def test_auto_pool_grows_to_hold_one_full_sequence_when_that_fits():
    one_seq = 16384 * 46080                     # SmolLM2 float32 at 16k tokens: 720 MiB
    assert auto_kv_memory(46080, 16, 16384, 64, available=4 * GIB) == one_seq
    assert one_seq > KV_AUTO_FRACTION * 4 * GIB
    tiny_ram = int(one_seq / KV_AUTO_MAX_FRACTION) - 1   # one sequence would take over half the RAM: not grown
    assert auto_kv_memory(46080, 16, 16384, 64, available=tiny_ram) == int(KV_AUTO_FRACTION * tiny_ram)


def test_auto_pool_never_exceeds_max_num_seqs_full_sequences():
    assert auto_kv_memory(512, 16, 256, 4, available=20 * GIB) == 4 * 256 * 512


def test_available_ram_reads_this_host():
    assert available_ram() > 0


def test_one_sequence_that_cannot_fit_is_refused_with_the_numbers():
    budget = KVBudget.from_memory(tiny_config(300), "float32", 16, 16 * 2**20)
    budget.check_fits(budget.num_tokens)
    with pytest.raises(ValueError, match=rf"--max-model-len {budget.num_tokens + 1} cannot fit the KV pool: "
                                         rf"one such sequence needs {budget.num_blocks + 1} blocks.*holds "
                                         rf"{budget.num_blocks} blocks = {budget.num_tokens} tokens"):
        budget.check_fits(budget.num_tokens + 1)


def test_engine_start_refuses_an_explicit_max_model_len_the_pool_cannot_hold():
    per_token = tiny_config(300).kv_bytes_per_token("float32")
    with pytest.raises(ValueError, match="--max-model-len 512 cannot fit"):
        build_engine(engine_config=EngineConfig(kv_cache_memory=100 * per_token, max_model_len=512), tiny=True)
    build_engine(engine_config=EngineConfig(kv_cache_memory=100 * per_token), tiny=True)   # default window: warned


def test_auto_kv_under_auto_dtype_is_int8_and_holds_the_window():
    engine = build_engine(engine_config=EngineConfig(dtype="auto", kv_cache_memory="auto", max_model_len=256),
                          tiny=True)
    assert engine.config.kv_dtype == "int8" and isinstance(engine.config.kv_cache_memory, int)
    assert engine.budget.num_tokens >= 256
    k, v = engine.runner.kv_caches[0]
    assert k.dtype == v.dtype == torch.int8


@pytest.mark.parametrize("kv_cache_dtype,dtype,expected", [
    ("auto", "float32", "float32"), ("auto", "bfloat16", "bfloat16"), ("auto", "auto", "int8"),
    ("float32", "auto", "float32"), ("bfloat16", "auto", "bfloat16"), ("int8", "float32", "int8")])
def test_kv_dtype_resolution(kv_cache_dtype, dtype, expected):
    assert EngineConfig(dtype=dtype, kv_cache_dtype=kv_cache_dtype).kv_dtype == expected


def test_the_same_budget_holds_more_tokens_in_a_smaller_kv_dtype():
    """Admission counts blocks of the pool; the pool's blocks come from bytes per token of the KV dtype."""
    config = tiny_config(300)
    memory = 64 * 2**20
    tokens = {d: KVBudget.from_memory(config, d, 16, memory).num_tokens for d in ("float32", "bfloat16", "int8")}
    per_row = {"float32": 4 * config.head_dim, "bfloat16": 2 * config.head_dim, "int8": config.head_dim + 4}
    for d, n in tokens.items():
        per_token = 2 * config.num_layers * config.num_kv_heads * per_row[d]
        assert n == memory // (per_token * 16) * 16
    assert tokens["float32"] < tokens["bfloat16"] < tokens["int8"]
    engine = build_engine(engine_config=EngineConfig(kv_cache_memory=memory, kv_cache_dtype="int8"), tiny=True)
    assert engine.budget.num_tokens == KVBudget.from_memory(engine.model_config, "int8", 16, memory).num_tokens


def test_the_sliding_layers_get_their_own_pool_only_where_it_holds_more_tokens():
    """Gemma-shaped (2 of 3 layers slide): the own pool is a fixed cost, so a budget it would mostly eat keeps
    one pool for every layer (the user asked for little memory; the window pool must not refuse them)."""
    config = tiny_config(300, num_layers=3, sliding_window=64,
                         layer_types=("sliding_attention", "sliding_attention", "full_attention"))
    window_blocks = 100
    window_bytes = window_blocks * 16 * config.kv_bytes_per_token("int8", 2)
    small = KVBudget.from_memory(config, "int8", 16, window_bytes + 10 * 16 * config.kv_bytes_per_token("int8", 1),
                                 window_blocks)
    assert small.window_blocks == 0 and small.bytes_per_token == config.kv_bytes_per_token("int8")
    large = KVBudget.from_memory(config, "int8", 16, 64 * 2**20, window_blocks)
    shared = KVBudget.from_memory(config, "int8", 16, 64 * 2**20)
    assert large.window_blocks == window_blocks and large.num_blocks > 2 * shared.num_blocks
    assert large.bytes_per_token == config.kv_bytes_per_token("int8", 1) and large.num_bytes <= 64 * 2**20
