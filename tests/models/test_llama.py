"""The model against transformers (via a saved HF directory), and paged batching invariants."""
import json

import pytest
import torch
import transformers

from haltwise.models.loader import load_model
from haltwise.models.tiny import tiny_llama
from tests.models.paged_runner import PagedRunner, greedy

VOCAB = 101


def save_hf_llama(tmp_path, tie: bool, rope_parameters=None, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                   max_position_embeddings=256, tie_word_embeddings=tie, eos_token_id=3,
                                   rope_parameters=rope_parameters or {"rope_type": "default", "rope_theta": 500.0})
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():  # HF init makes norms exactly 1; perturb so they are tested too
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(tmp_path, safe_serialization=True)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 7]}))
    return model


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]          # (T, vocab)


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("rope", [None, {"rope_type": "yarn", "factor": 4.0, "rope_theta": 500.0,
                                         "original_max_position_embeddings": 64}])
def test_hf_directory_logits_match_transformers(tmp_path, tie, rope):
    theirs = save_hf_llama(tmp_path, tie, rope)
    loaded = load_model(tmp_path)
    assert loaded.format == "hf" and loaded.generation_eos_ids == (3, 7)
    assert loaded.config.eos_token_ids == (3,) and loaded.config.tie_word_embeddings == tie
    assert (loaded.model.lm_head.weight is loaded.model.model.embed_tokens.weight) == tie
    ids = torch.randint(0, VOCAB, (90,), generator=torch.Generator().manual_seed(1)).tolist()
    want = hf_logits(theirs, ids)
    runner = PagedRunner(loaded.model, 1, len(ids), block_size=8)
    got_prefill = runner.step([0], [ids[:70]], [0])[0]
    assert (got_prefill - want[69]).abs().max() < 1e-4
    for i in range(70, 90):                                   # decodes reuse the cache
        got = runner.step([0], [[ids[i]]], [i])[0]
        assert (got - want[i]).abs().max() < 1e-4


def test_sharded_directory(tmp_path):
    theirs = save_hf_llama(tmp_path / "one", tie=False)
    theirs.save_pretrained(tmp_path / "sharded", safe_serialization=True, max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    a, b = load_model(tmp_path / "one").model, load_model(tmp_path / "sharded").model
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), name


def test_batched_prefill_equals_separate():
    model = tiny_llama(VOCAB, seed=3)
    a = torch.randint(0, VOCAB, (37,), generator=torch.Generator().manual_seed(2)).tolist()
    b = torch.randint(0, VOCAB, (11,), generator=torch.Generator().manual_seed(3)).tolist()
    together = PagedRunner(model, 2, 64, block_size=16).step([0, 1], [a, b], [0, 0])
    alone_a = PagedRunner(model, 1, 64, block_size=16).step([0], [a], [0])
    alone_b = PagedRunner(model, 1, 64, block_size=16).step([0], [b], [0])
    assert together.shape == (2, VOCAB) and together.dtype == torch.float32
    assert torch.allclose(together[0], alone_a[0], atol=1e-5)
    assert torch.allclose(together[1], alone_b[0], atol=1e-5)
    assert not torch.allclose(together[0], together[1], atol=1e-3)


def test_mixed_step_chunked_prefill_and_decode():
    model = tiny_llama(VOCAB, seed=4)
    prompt = list(range(5, 45))
    full = PagedRunner(model, 1, 64, block_size=4).step([0], [prompt], [0])[0]
    runner = PagedRunner(model, 2, 64, block_size=4)
    runner.step([1], [[9, 8, 7]], [0])                               # another sequence starts first
    runner.step([0, 1], [prompt[:17], [6]], [0, 3])                  # chunk 1 of seq 0 + decode of seq 1
    out = runner.step([1, 0], [[5], prompt[17:]], [4, 17])           # decode + last chunk, other order
    assert torch.allclose(out[1], full, atol=1e-5)


def test_tiny_llama_is_seeded_and_small():
    a, b, c = tiny_llama(VOCAB, seed=0), tiny_llama(VOCAB, seed=0), tiny_llama(VOCAB, seed=1)
    assert torch.equal(a.model.layers[0].self_attn.qkv_proj.weight, b.model.layers[0].self_attn.qkv_proj.weight)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)
    assert a.config.num_layers == 2 and a.max_model_len == 512
    assert tiny_llama(VOCAB, num_layers=3).config.num_layers == 3
    out, _ = greedy(a, [1, 2, 3], 10)
    assert len(out) == 10 and all(0 <= t < VOCAB for t in out)


def test_bfloat16_weights_close_to_float32(tmp_path):
    save_hf_llama(tmp_path, tie=True)
    f32, bf16 = load_model(tmp_path).model, load_model(tmp_path, dtype="bfloat16").model
    assert bf16.model.layers[0].mlp.down_proj.weight.dtype == torch.bfloat16
    ids = list(range(30))
    a = PagedRunner(f32, 1, 32).step([0], [ids], [0])
    b = PagedRunner(bf16, 1, 32).step([0], [ids], [0])
    assert b.dtype == torch.float32 and (a - b).abs().max() < 0.1 * a.abs().max()
