"""GGUF metadata, name mapping, q/k unpermutation and clear load errors, on GGUFs written in tmp_path."""
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quants

from haltwise.errors import ModelLoadError
from haltwise.gguf.reader import hf_name, unpermute_qk
from haltwise.models.loader import load_model
from haltwise.models.tiny import tiny_llama
from tests.models.paged_runner import PagedRunner

VOCAB = 64
HF_TO_GGUF = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """What llama.cpp's converter does to q/k rows (its published formula)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_state(model):
    """HF-named float32 numpy weights of our model (fused rows split back)."""
    c, out = model.config, {}
    for name, p in model.named_parameters():
        w = p.detach().numpy().copy()
        if name.endswith("qkv_proj.weight"):
            base = name.removesuffix("qkv_proj.weight")
            q, k, v = np.split(w, [c.num_heads * c.head_dim, (c.num_heads + c.num_kv_heads) * c.head_dim])
            out |= {base + "q_proj.weight": q, base + "k_proj.weight": k, base + "v_proj.weight": v}
        elif name.endswith("gate_up_proj.weight"):
            base = name.removesuffix("gate_up_proj.weight")
            out |= dict(zip([base + "gate_proj.weight", base + "up_proj.weight"], np.split(w, 2)))
        else:
            out[name] = w
    return out


def write_gguf(path, model, arch="llama", quant=None, drop_vocab_size=True):
    """Write `model` as llama.cpp would: GGUF names, permuted q/k, optional quantization of 2-D weights."""
    c = model.config
    w = GGUFWriter(str(path), arch)
    w.add_block_count(c.num_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_heads)
    w.add_head_count_kv(c.num_kv_heads)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_token_list([f"t{i}" for i in range(c.vocab_size)])  # vocab counted from here
    w.add_eos_token_id(2)
    w.add_bos_token_id(1)
    for name, t in hf_state(model).items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        if ".layers." in name:
            layer, rest = name.removeprefix("model.layers.").split(".", 1)
            part = rest.removesuffix(".weight")
            gname = f"blk.{layer}.{HF_TO_GGUF[part]}.weight"
            if part == "self_attn.q_proj":
                t = llama_cpp_permute(t, c.num_heads)
            elif part == "self_attn.k_proj":
                t = llama_cpp_permute(t, c.num_kv_heads)
        else:
            gname = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                     "lm_head.weight": "output.weight"}[name]
        if quant is not None and t.ndim == 2:
            w.add_tensor(gname, quants.quantize(t, quant), raw_dtype=quant)
        else:
            w.add_tensor(gname, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_name_mapping():
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert hf_name("blk.0.attn_output.weight") == "model.layers.0.self_attn.o_proj.weight"
    assert hf_name("blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight"
    assert hf_name("blk.3.ffn_down.weight") == "model.layers.3.mlp.down_proj.weight"
    assert hf_name("output_norm.weight") == "model.norm.weight"
    assert hf_name("output.weight") == "lm_head.weight"
    assert hf_name("rope_freqs.weight") is None
    assert hf_name("blk.0.ffn_gate_inp.weight") == "model.layers.0.mlp.gate.weight"      # MoE router
    assert hf_name("blk.0.ffn_gate_exps.weight") == "model.layers.0.mlp.experts.#.gate_proj.weight"  # per expert
    with pytest.raises(KeyError):
        hf_name("blk.0.ssm_conv1d.weight")


def test_unpermute_inverts_llama_cpp_permute():
    w = np.random.default_rng(0).standard_normal((3 * 8, 5)).astype(np.float32)
    back = unpermute_qk(torch.from_numpy(llama_cpp_permute(w, 3)), 3)
    assert torch.equal(back, torch.from_numpy(w))
    assert not np.array_equal(llama_cpp_permute(w, 3), w)


@pytest.mark.parametrize("tie", [True, False])
def test_gguf_round_trip_gives_same_model(tmp_path, tie):
    ours = tiny_llama(VOCAB, seed=5, tie_word_embeddings=tie)
    loaded = load_model(write_gguf(tmp_path / "tiny.gguf", ours))
    c = loaded.config
    assert loaded.format == "gguf" and c.vocab_size == VOCAB and c.head_dim == 16 and c.num_kv_heads == 2
    assert c.tie_word_embeddings == tie and c.eos_token_ids == (2,) and c.bos_token_id == 1
    assert loaded.max_model_len == 512
    for (name, p), (_, q) in zip(ours.named_parameters(), loaded.model.named_parameters()):
        assert torch.equal(p, q), name
    ids = list(range(3, 40))
    assert torch.equal(PagedRunner(ours, 1, 40).step([0], [ids], [0]),
                       PagedRunner(loaded.model, 1, 40).step([0], [ids], [0]))


def test_quantized_gguf_loads_dequantized_weights(tmp_path):
    ours = tiny_llama(VOCAB, seed=6)
    loaded = load_model(write_gguf(tmp_path / "q.gguf", ours, quant=Q.Q4_1)).model
    w = ours.model.layers[1].mlp.down_proj.weight.detach().numpy()
    want = quants.dequantize(quants.quantize(w, Q.Q4_1), Q.Q4_1)
    assert torch.equal(loaded.model.layers[1].mlp.down_proj.weight, torch.from_numpy(want))


def test_missing_file_is_clear(tmp_path):
    with pytest.raises(ModelLoadError, match="nothere.gguf"):
        load_model(tmp_path / "nothere.gguf")


def test_not_a_gguf_is_clear(tmp_path):
    bad = tmp_path / "junk.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(ModelLoadError, match="junk.gguf.*not a readable GGUF"):
        load_model(bad)


def test_unsupported_architecture_is_clear(tmp_path):
    path = write_gguf(tmp_path / "g.gguf", tiny_llama(VOCAB), arch="gpt2")
    with pytest.raises(ModelLoadError, match=r"g\.gguf: architecture 'gpt2' is not supported") as e:
        load_model(path)
    for name in ("llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "qwen2moe", "qwen3_moe"):
        assert name in str(e.value).partition("supported: ")[2].split(", ") or \
            name + ")" in str(e.value), f"{name} missing from {e.value}"


def test_unsupported_quant_is_clear(tmp_path):
    model = tiny_llama(VOCAB, hidden_size=256, intermediate_size=256, num_heads=4, num_kv_heads=2, head_dim=64)
    path = write_gguf(tmp_path / "tq.gguf", model, quant=Q.TQ2_0)       # a ternary type we do not decode
    with pytest.raises(ModelLoadError, match=r"tq\.gguf: tensor .* uses quantization TQ2_0"):
        load_model(path)


def test_bad_dtype_and_too_long_context(tmp_path):
    path = write_gguf(tmp_path / "t.gguf", tiny_llama(VOCAB))
    with pytest.raises(ModelLoadError, match="dtype"):
        load_model(path, dtype="int8")
    with pytest.raises(ModelLoadError, match="max_model_len 600 .* 1..512"):
        load_model(path, max_model_len=600)
    scaled = load_model(path, rope_scaling={"rope_type": "linear", "factor": 2.0}, max_model_len=1000)
    assert scaled.max_model_len == 1000 and scaled.config.rope_scaling["factor"] == 2.0
    assert scaled.model.model.rotary_emb.cos.shape == (1000, 16)
