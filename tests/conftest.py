"""Shared fixtures: the tiny random model (fast) and the real SmolLM2 (loaded once per session)."""
import pytest

from haltwise.sampling_params import RepetitionDetection, SamplingParams

NO_LOOP = RepetitionDetection(enabled=False)


def greedy(max_tokens: int = 16, **kw) -> SamplingParams:
    """Greedy params; the loop detector is off unless asked (random tiny models loop at once)."""
    kw.setdefault("repetition_detection", NO_LOOP)
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, float32, through the offline API."""
    from haltwise.llm import LLM

    return LLM(dtype="float32", kv_cache_memory=512 * 2**20)


@pytest.fixture(autouse=True)
def _torch_threads_restored():
    """An engine on the native stack leaves its thread's torch ops on one thread (engine/step_threads.py);
    later tests that run torch themselves (the float32 oracles) get torch's default back."""
    yield
    import torch

    from haltwise.engine.step_threads import TORCH_DEFAULT_THREADS

    torch.set_num_threads(TORCH_DEFAULT_THREADS)
