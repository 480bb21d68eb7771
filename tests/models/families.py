"""Test helper: tiny random transformers models of every family, saved as HF directories and as GGUFs
written the way llama.cpp's converter writes them (names, q/k permutation, Gemma's 1 + w norms,
rope_freqs), independently of haltwise's reader."""
from __future__ import annotations

import math

import numpy as np
import torch
import transformers
from gguf import GGUFWriter, quants

VOCAB = 97
WINDOW = 8          # sliding window of the tiny sliding families: prompts here are several windows long
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6,
              eos_token_id=3, bos_token_id=1)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32, "rope_theta": 500.0}


def _config(family: str):
    if family == "llama":
        return transformers.LlamaConfig(**COMMON, tie_word_embeddings=False)
    if family == "llama3":
        return transformers.LlamaConfig(**COMMON, tie_word_embeddings=True, rope_parameters=dict(LLAMA3_ROPE))
    if family == "mistral":
        return transformers.MistralConfig(**COMMON, sliding_window=WINDOW, tie_word_embeddings=False)
    if family == "qwen2":
        return transformers.Qwen2Config(**COMMON, tie_word_embeddings=False,
                                        rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    if family == "qwen3":
        return transformers.Qwen3Config(**COMMON, tie_word_embeddings=True)
    if family == "gemma3":
        cfg = dict(COMMON, num_hidden_layers=6)
        return transformers.Gemma3TextConfig(
            **cfg, sliding_window=WINDOW, query_pre_attn_scalar=24, tie_word_embeddings=True,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2, pad_token_id=0,
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    raise KeyError(family)


FAMILIES = ("llama", "llama3", "mistral", "qwen2", "qwen3", "gemma3")


def hf_model(family: str, seed: int = 0, **overrides):
    """A random float32 transformers model of `family` (norms and biases perturbed so they matter)."""
    torch.manual_seed(seed)
    cfg = _config(family)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_((0.3 if "norm" in name else 0.05) * torch.randn_like(p))
    return model


def save_hf(model, directory):
    model.save_pretrained(directory, safe_serialization=True)
    return directory


_GGUF_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
               "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}
_GGUF_ARCH = {"llama": "llama", "llama3": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
              "gemma3": "gemma3"}


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutation of q/k rows (its published formula)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama3_factors(cfg) -> np.ndarray:
    """rope_freqs as llama.cpp's converter computes them for rope_type llama3."""
    rp = cfg.rope_parameters
    base, dim = rp["rope_theta"], cfg.head_dim
    factor, low, high, old = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"], \
        rp["original_max_position_embeddings"]
    out = []
    for freq in 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim)):
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(model, family: str, path, quant=None):
    """`model` as llama.cpp would write it; quant: a gguf type for the 2-D weights (None = float32)."""
    cfg, arch = model.config, _GGUF_ARCH[family]
    w = GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    theta = (cfg.rope_parameters["full_attention"] if family == "gemma3" else cfg.rope_parameters)["rope_theta"]
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    if getattr(cfg, "sliding_window", None) and family in ("mistral", "gemma3"):
        w.add_sliding_window(cfg.sliding_window)
    if family == "gemma3":
        w.add_sliding_window_pattern([t == "sliding_attention" for t in cfg.layer_types])
        w.add_rope_freq_base_swa(cfg.rope_parameters["sliding_attention"]["rope_theta"])
    w.add_token_list([f"t{i}" for i in range(cfg.vocab_size)])
    w.add_eos_token_id(3)
    w.add_bos_token_id(1)
    if family == "llama3":
        w.add_tensor("rope_freqs.weight", _llama3_factors(cfg))
    sandwich = {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                "post_feedforward_layernorm": "post_ffw_norm"}
    for name, p in model.state_dict().items():
        t = p.detach().numpy().astype(np.float32).copy()
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        if ".layers." in name:
            layer, rest = name.removeprefix("model.layers.").split(".", 1)
            part, kind = rest.rsplit(".", 1)
            gpart = (sandwich if family == "gemma3" else {"post_attention_layernorm": "ffn_norm"}).get(part) \
                or _GGUF_LAYER[part]
            gname = f"blk.{layer}.{gpart}.{kind}"
            if arch == "llama" and part == "self_attn.q_proj":
                t = _permute(t, cfg.num_attention_heads)
            elif arch == "llama" and part == "self_attn.k_proj":
                t = _permute(t, cfg.num_key_value_heads)
        else:
            gname = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                     "lm_head.weight": "output.weight"}[name]
        if family == "gemma3" and gname.endswith("norm.weight"):
            t = t + 1.0                                   # llama.cpp stores Gemma's norms as 1 + w
        if quant is not None and t.ndim == 2:
            w.add_tensor(gname, quants.quantize(t, quant), raw_dtype=quant)
        else:
            w.add_tensor(gname, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
