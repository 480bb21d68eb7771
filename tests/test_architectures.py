"""Every family, as an HF directory and as a GGUF, token-exact with transformers in float32.

Prompts are several sliding windows long and the cache uses 4-token blocks, so window masks that
cross blocks, chunked prefill and decodes past the window are all exercised.
"""
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.models.loader import load_model
from tests.models.families import FAMILIES, VOCAB, WINDOW, hf_model, save_hf, write_gguf
from tests.models.paged_runner import PagedRunner, greedy

NEW_TOKENS = 24
@pytest.fixture(autouse=True)
def no_weight_cache(monkeypatch):
    """These GGUFs live in tmp_path: keep their dequantized copies out of the user's cache."""
    monkeypatch.setenv("HALTWISE_WEIGHT_CACHE", "0")


PROMPT = torch.randint(4, VOCAB, (3 * WINDOW + 5,), generator=torch.Generator().manual_seed(7)).tolist()


def transformers_greedy(model, ids, n):
    model.generation_config.eos_token_id = None          # no stop: compare all n tokens
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(ids):].tolist(), out.logits[0][0]


def assert_same_greedy(theirs, ours, ids=PROMPT):
    want, want_logits = transformers_greedy(theirs, ids, NEW_TOKENS)
    got, got_logits = greedy(ours, ids, NEW_TOKENS, block_size=4)
    assert (got_logits - want_logits).abs().max() < 1e-4
    assert len(want) == NEW_TOKENS and got == want


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_directory_is_token_exact(tmp_path, family):
    theirs = hf_model(family)
    loaded = load_model(save_hf(theirs, tmp_path))
    assert loaded.format == "hf"
    assert_same_greedy(theirs, loaded.model)


@pytest.mark.parametrize("family", FAMILIES)
def test_gguf_is_token_exact(tmp_path, family):
    # GGUF does not store Gemma's query_pre_attn_scalar: llama.cpp (and we) take head_dim.
    theirs = hf_model(family, seed=1, **({"query_pre_attn_scalar": 16} if family == "gemma3" else {}))
    loaded = load_model(write_gguf(theirs, family, tmp_path / f"{family}.gguf"))
    assert loaded.format == "gguf"
    assert_same_greedy(theirs, loaded.model)


def test_config_of_each_family(tmp_path):
    seen = {}
    for family in FAMILIES:
        seen[family] = load_model(save_hf(hf_model(family), tmp_path / family)).config
    assert seen["qwen2"].qkv_bias and not seen["qwen3"].qkv_bias and seen["qwen3"].architecture == "qwen3"
    assert seen["mistral"].sliding_window == WINDOW and seen["mistral"].is_sliding(2)
    assert seen["qwen2"].sliding_window is None                      # use_sliding_window is off
    g = seen["gemma3"]
    assert g.hidden_act == "gelu_pytorch_tanh" and g.query_pre_attn_scalar == 24 and g.rope_local_theta == 1e4
    assert [g.is_sliding(i) for i in range(6)] == [True, True, False] * 2
    assert seen["llama3"].rope_scaling["rope_type"] == "llama3"


def test_gemma3_gguf_norms_are_stored_plus_one(tmp_path):
    theirs = hf_model("gemma3", seed=2, query_pre_attn_scalar=16)
    loaded = load_model(write_gguf(theirs, "gemma3", tmp_path / "g.gguf")).model
    want = theirs.model.layers[1].pre_feedforward_layernorm.weight
    assert torch.allclose(loaded.model.layers[1].pre_feedforward_layernorm.weight, want, atol=1e-6)
    assert loaded.config.layer_types[2] == "full_attention" and loaded.model.rotary_emb_local is not None


def test_llama3_gguf_reads_rope_freqs(tmp_path):
    loaded = load_model(write_gguf(hf_model("llama3"), "llama3", tmp_path / "l3.gguf"))
    factors = loaded.config.rope_freq_factors
    assert factors is not None and len(factors) == 8 and factors[0] == 1.0 and factors[-1] == 8.0


@pytest.mark.parametrize("family", ["qwen2", "gemma3"])
def test_k_quant_gguf_loads_the_dequantized_weights(tmp_path, family):
    theirs = hf_model(family, seed=3, **({"query_pre_attn_scalar": 16} if family == "gemma3" else {}))
    loaded = load_model(write_gguf(theirs, family, tmp_path / "q.gguf", quant=Q.Q5_0)).model
    down = loaded.model.layers[0].mlp.down_proj.weight
    want = theirs.model.layers[0].mlp.down_proj.weight
    assert not torch.equal(down, want) and (down - want).abs().max() < 0.05 * want.abs().max()


def test_batched_sliding_sequences_equal_separate(tmp_path):
    """Sequences of different lengths in one step see only their own window."""
    model = load_model(save_hf(hf_model("gemma3"), tmp_path)).model
    a, b = PROMPT, PROMPT[:WINDOW - 3]
    together = PagedRunner(model, 2, 64, block_size=4).step([0, 1], [a, b], [0, 0])
    for row, ids in enumerate([a, b]):
        alone = PagedRunner(model, 1, 64, block_size=4).step([0], [ids], [0])[0]
        assert (together[row] - alone).abs().max() < 1e-5
    runner = PagedRunner(model, 2, 64, block_size=4)                 # chunked prefill + a decode, mixed
    runner.step([0, 1], [a[:11], b], [0, 0])
    mixed = runner.step([0, 1], [a[11:], [5]], [11, len(b)])
    full = PagedRunner(model, 1, 64, block_size=4).step([0], [a], [0])[0]
    assert (mixed[0] - full).abs().max() < 1e-4


@pytest.mark.parametrize("prompt_len", [12, 20, 50])
def test_dynamic_rope_matches_transformers_short_and_long(tmp_path, prompt_len):
    """Window 32: a 12-token prompt stays unscaled throughout; 20 + 24 tokens grows past the window
    while decoding; 50 starts past it. transformers rescales per step exactly so."""
    rope = {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 500.0}
    theirs = hf_model("llama", seed=4, max_position_embeddings=32, rope_parameters=rope)
    loaded = load_model(save_hf(theirs, tmp_path))
    assert loaded.max_model_len == 128
    ids = torch.randint(4, VOCAB, (prompt_len,), generator=torch.Generator().manual_seed(prompt_len)).tolist()
    assert_same_greedy(theirs, loaded.model, ids)
    if prompt_len == 12:                        # within the window: exactly the unscaled model's prefill
        unscaled = load_model(tmp_path, rope_scaling={}).model
        assert torch.equal(greedy(unscaled, ids, 1, block_size=4)[1], greedy(loaded.model, ids, 1, block_size=4)[1])
