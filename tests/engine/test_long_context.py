"""Honest limits past the trained window (SmolLM2: 8192): refused with the numbers, or served with RoPE scaling."""
import pytest

from haltwise_bench.common import long_text
from haltwise.errors import ContextLengthExceeded
from haltwise.llm import LLM
from haltwise.errors import ModelLoadError
from tests.conftest import greedy

YARN_2X = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8192}


@pytest.fixture(scope="module")
def prompt_9000(smollm2):
    ids = smollm2.tokenizer.encode(long_text(), add_special_tokens=False)[:9000]
    assert len(ids) == 9000
    return ids


def test_9000_tokens_without_scaling_are_refused_with_the_numbers(smollm2, prompt_9000):
    assert smollm2.engine.max_model_len == 8192
    with pytest.raises(ContextLengthExceeded) as e:
        smollm2.generate(prompt_9000, greedy(4))
    assert "9000" in e.value.message and "8192" in e.value.message
    assert e.value.code == "context_length_exceeded"
    assert not smollm2.engine.has_unfinished()                    # nothing was kept


def test_truncate_prompt_tokens_keeps_the_last_n_and_says_so(smollm2, prompt_9000):
    out = smollm2.generate(prompt_9000, greedy(3, truncate_prompt_tokens=1000, ignore_eos=True))[0]
    assert out.prompt_token_ids == prompt_9000[-1000:]
    assert out.num_truncated_prompt_tokens == 8000
    direct = smollm2.generate(prompt_9000[-1000:], greedy(3, ignore_eos=True))[0]
    assert direct.num_truncated_prompt_tokens == 0
    assert out.outputs[0].token_ids == direct.outputs[0].token_ids


def test_max_model_len_beyond_what_the_scaling_supports_is_refused():
    with pytest.raises(ModelLoadError, match=r"max_model_len 9000 is outside 1\.\.8192.*rope type 'default'"):
        LLM(max_model_len=9000)
    with pytest.raises(ModelLoadError, match=r"max_model_len 20000 is outside 1\.\.16384.*rope type 'yarn'"):
        LLM(rope_scaling=YARN_2X, max_model_len=20000)


@pytest.mark.slow
def test_yarn_factor_2_serves_the_9000_token_prompt(prompt_9000):
    llm = LLM(rope_scaling=YARN_2X, max_model_len=16384, kv_cache_memory=768 * 2**20)  # one 16k sequence: 720 MiB
    assert llm.engine.max_model_len == 16384
    assert llm.engine.budget.num_tokens >= 9000 + 3                 # the KV pool holds the whole request
    out = llm.generate(prompt_9000, greedy(3, ignore_eos=True))[0]
    assert out.prompt_token_ids == prompt_9000 and out.num_truncated_prompt_tokens == 0
    completion = out.outputs[0]
    assert len(completion.token_ids) == 3 and completion.termination.reason.value == "max_tokens"
    with pytest.raises(ContextLengthExceeded, match="16384"):     # the new window is enforced too
        llm.generate(prompt_9000 * 2, greedy(3))
