"""Gemma 3 270M and Qwen2.5-Coder-0.5B (Q4_K_M GGUFs): greedy tokens equal transformers' float32.

The oracle tokens are fixtures (tests/models/fixtures/*.json, made by make_oracle_fixtures.py from
transformers' own GGUF loading); one live transformers run per model re-checks them (slow).
"""
import json
from pathlib import Path

import pytest

from haltwise.models.loader import load_model
from tests.models.paged_runner import greedy, greedy_batch
from tests.models.real_models import real_model_path, transformers_gguf_model, transformers_greedy

# Loading a 0.5B float32 model and decoding 5-6 prompts takes well over 30 s on 2 cores.
pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parent / "fixtures"
MODELS = ["gemma3-270m", "qwen2.5-coder-0.5b"]


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture(scope="module", params=MODELS)
def real(request):
    name = request.param
    path = real_model_path(name)
    return name, path, load_model(path, max_model_len=2048)


def test_fixture_is_for_this_file(real):
    name, path, _ = real
    record = fixture(name)
    assert record["file_size"] == path.stat().st_size and record["dtype"] == "float32"
    assert len(record["cases"]) >= 5 and all(len(c["tokens"]) == record["new_tokens"] >= 32 for c in record["cases"])


def test_config(real):
    name, _, loaded = real
    c = loaded.config
    if name == "gemma3-270m":
        assert (c.architecture, c.num_layers, c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads) == \
            ("gemma3", 18, 640, 256, 4, 1)
        assert c.sliding_window == 512 and c.rope_theta == 1e6 and c.rope_local_theta == 1e4
        assert [c.is_sliding(i) for i in range(6)] == [True] * 5 + [False] and c.tie_word_embeddings
        assert c.hidden_act == "gelu_pytorch_tanh"
    else:
        assert (c.architecture, c.num_layers, c.hidden_size, c.head_dim, c.num_heads, c.num_kv_heads) == \
            ("qwen2", 24, 896, 64, 14, 2)
        assert c.qkv_bias and not c.tie_word_embeddings and c.sliding_window is None


def test_greedy_tokens_equal_transformers_fixture(real):
    name, _, loaded = real
    record = fixture(name)
    prompts = [c["prompt_ids"] for c in record["cases"]]
    got = greedy_batch(loaded.model, prompts, record["new_tokens"])
    for case, tokens in zip(record["cases"], got):
        assert tokens == case["tokens"], case["text"]


@pytest.mark.slow
def test_live_transformers_oracle(real):
    """transformers, loading the same GGUF in float32, agrees with us and with the fixture."""
    name, path, loaded = real
    case = fixture(name)["cases"][0]
    theirs = transformers_greedy(transformers_gguf_model(path), case["prompt_ids"], 32)
    ours, _ = greedy(loaded.model, case["prompt_ids"], 32)
    assert theirs == case["tokens"][:32] and ours == theirs
