"""The engine end to end (LLM(model=path)) on Qwen2.5 and Gemma 3: chunked prefill, batching, head_dim
256 and sliding-window layers, token-exact with transformers' fixture tokens."""
import json
from pathlib import Path

import pytest

from haltwise.llm import LLM
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from tests.models.real_models import real_model_path

# Loading a 0.5B float32 model and decoding 5-6 prompts takes well over 30 s on 2 cores.
pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parents[1] / "models" / "fixtures"


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "gemma3-270m"])
def test_llm_greedy_equals_transformers(name):
    record = json.loads((FIXTURES / f"{name}.json").read_text())
    try:
        # 64-token steps: every prompt is prefilled in chunks, mixed with other sequences' decodes.
        llm = LLM(model=real_model_path(name), max_model_len=2048, kv_cache_memory=192 * 2**20,
                  max_num_batched_tokens=64, long_prefill_chunk=64)
    except ValueError as e:
        if "tokenizer" in str(e) and "not supported" in str(e):
            pytest.skip(f"{name}: this checkout cannot build its tokenizer yet ({e})")
        raise
    params = SamplingParams(temperature=0.0, max_tokens=record["new_tokens"], ignore_eos=True,
                            repetition_detection=RepetitionDetection(enabled=False))
    outs = llm.generate([c["prompt_ids"] for c in record["cases"]], params)
    for case, out in zip(record["cases"], outs, strict=True):
        assert out.outputs[0].token_ids == case["tokens"], case["text"][:60]
