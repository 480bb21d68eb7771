"""What a load is estimated to take (registry/sizing.py): a MoE model whose experts stay mapped
(--expert-weights, engine/expert_weights.py) is not charged for them -- they are page cache the kernel reclaims."""
from haltwise.config import EngineConfig
from haltwise.engine.expert_weights import expert_bytes
from haltwise.registry.memory import WEIGHT_FACTOR
from haltwise.registry.sizing import estimate_load
from tests.models.converted import fixture


def test_mapped_experts_are_not_counted_as_the_models_memory():
    path = fixture("qwen3moe").gguf("q8_0")
    free = 8 << 30
    held = estimate_load(path, EngineConfig(kv_cache_memory=1 << 20, expert_weights="resident"), free)
    mapped = estimate_load(path, EngineConfig(kv_cache_memory=1 << 20, expert_weights="mapped"), free)
    assert held.weights - mapped.weights == int(path.stat().st_size * WEIGHT_FACTOR) - int(
        (path.stat().st_size - expert_bytes(path)) * WEIGHT_FACTOR) > 0
    assert held.caches == mapped.caches
