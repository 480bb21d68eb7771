"""Which threads run a step: on the native stack every step, the pool gets the engine's threads and
torch one (no OpenMP team left spinning beside the pool); elsewhere torch gets them and the pool follows."""
import pytest
import torch

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.engine.step_threads import TORCH_DEFAULT_THREADS, engine_threads, set_step_threads
from haltwise.kernels.native import build
from haltwise.llm import LLM
from tests.conftest import greedy

native = build.load()
pytestmark = pytest.mark.skipif(native is None, reason="native kernels unavailable")


def test_the_default_path_steps_on_the_pool_with_torch_on_one_thread():
    engine = build_engine(None, EngineConfig(dtype="auto", num_threads=2, kv_cache_memory=64 * 2**20), tiny=True)
    assert engine.runner.model.model.native_decode.every_step
    assert (native.threads(), torch.get_num_threads()) == (2, 1)


def test_float32_steps_on_torch_threads_and_the_pool_follows_them():
    build_engine(None, EngineConfig(dtype="auto", num_threads=2, kv_cache_memory=64 * 2**20), tiny=True)
    build_engine(None, EngineConfig(dtype="float32", num_threads=2, kv_cache_memory=64 * 2**20), tiny=True)
    assert torch.get_num_threads() == 2 and native.threads() == torch.get_num_threads()


def test_threads_default_to_torchs_own_count():
    assert engine_threads(EngineConfig()) == TORCH_DEFAULT_THREADS
    assert engine_threads(EngineConfig(num_threads=3)) == 3


@pytest.mark.parametrize("threads", [1, 2])
def test_tokens_do_not_depend_on_which_threads_run_the_step(threads):
    llm = LLM(tiny=True, dtype="auto", kv_cache_memory=64 * 2**20)
    prompts = ["a b c", "the quick brown fox", "x"]
    pooled = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy(12))]
    set_step_threads(threads, native_every_step=False)       # the pool follows torch, as before
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, greedy(12))] == pooled


def test_the_server_engine_steps_on_its_own_thread_with_torch_on_one():
    from haltwise.engine.async_engine import AsyncEngine

    engine = AsyncEngine.build(None, EngineConfig(dtype="auto", num_threads=2, kv_cache_memory=64 * 2**20), tiny=True)
    try:
        assert engine._torch_thread.call(torch.get_num_threads) == 1 and native.threads() == 2
    finally:
        engine._torch_thread.close()
