"""`haltwise bench footprint` reads the KV capacity from the line a real engine prints at start."""
import pytest

from haltwise_bench.footprint import kv_capacity
from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine


@pytest.mark.parametrize("kv_dtype", ["float32", "int8"])
def test_kv_capacity_is_the_engines_own_token_count(kv_dtype) -> None:
    engine = build_engine(engine_config=EngineConfig(kv_cache_memory=3 * 2**20, kv_cache_dtype=kv_dtype), tiny=True)
    log = f"loading...\nhaltwise: {engine.describe()}\nready"
    assert kv_capacity(log) == engine.budget.num_tokens > 0
    assert f"KV dtype {kv_dtype}" in engine.describe()


def test_a_log_without_the_line_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no 'KV cache"):
        kv_capacity("haltwise: nothing here")


def test_the_start_line_states_the_pool_against_full_capacity() -> None:
    engine = build_engine(engine_config=EngineConfig(kv_cache_memory=3 * 2**20, max_num_seqs=4), tiny=True)
    full = 4 * engine.budget.blocks_for(engine.max_model_len) * engine.budget.block_size
    assert f"max_num_seqs x max_model_len = {full} tokens would need" in engine.describe()
