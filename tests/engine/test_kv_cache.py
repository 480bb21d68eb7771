"""The KV pool sized to the host: auto = a share of available RAM; a max_model_len that cannot fit is refused."""
import pytest

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.engine.kv_cache import (KV_AUTO_FRACTION, KV_AUTO_MAX_FRACTION, KVBudget, auto_kv_memory,
                                      available_ram, parse_memory)
from haltwise.models.tiny import tiny_config

GIB = 2**30


def test_auto_pool_is_a_share_of_available_ram():
    assert auto_kv_memory(46080, 16, 8192, available=20 * GIB) == int(KV_AUTO_FRACTION * 20 * GIB)


def test_auto_pool_grows_to_hold_one_full_sequence_when_that_fits():
    one_seq = 16384 * 46080                     # SmolLM2 float32 at 16k tokens: 720 MiB
    assert auto_kv_memory(46080, 16, 16384, available=4 * GIB) == one_seq
    assert one_seq > KV_AUTO_FRACTION * 4 * GIB
    tiny_ram = int(one_seq / KV_AUTO_MAX_FRACTION) - 1   # one sequence would take over half the RAM: not grown
    assert auto_kv_memory(46080, 16, 16384, available=tiny_ram) == int(KV_AUTO_FRACTION * tiny_ram)


def test_parse_memory_keeps_auto_and_reads_this_hosts_ram():
    assert parse_memory("auto") == "auto" and parse_memory("AUTO") == "auto"
    assert parse_memory("512MiB") == 512 * 2**20
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


def test_auto_kv_under_auto_dtype_is_float32_and_holds_the_window():
    engine = build_engine(engine_config=EngineConfig(dtype="auto", kv_cache_memory="auto", max_model_len=256),
                          tiny=True)
    assert engine.config.kv_dtype == "float32" and isinstance(engine.config.kv_cache_memory, int)
    assert engine.budget.num_tokens >= 256
