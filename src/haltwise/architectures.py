"""The model families haltwise runs, each stated as what it changes relative to Llama.

One set of layers (models/llama.py) serves every family; a family is a named ArchOptions entry in
ARCHITECTURES, keyed by the architecture name GGUF files (`general.architecture`) and config.json
(`model_type`) use. Per-model numbers (window sizes, rope bases, biases) live in ModelConfig; the
options here are what is structurally true of the whole family.

    llama   (also Mistral, Llama 3.x): the baseline.
    qwen2   q/k/v biases.
    qwen3   q/k RMSNorm over each head before RoPE, no biases.
    gemma3  embeddings x sqrt(hidden); RMSNorm scales by (1 + w) in float32; four norms per layer
            (input, post-attention, pre- and post-feedforward); q/k norms; GELU-tanh MLP; sliding
            layers with their own RoPE base; no llama.cpp q/k permutation in GGUF.
    gemma2  gemma3 without q/k norms and without a separate sliding-layer RoPE base; every 2nd layer global;
            attention scores and final logits soft-capped (per-model caps in ModelConfig).
    gpt-oss q/k/v/o biases, per-head attention sinks, every 2nd layer global, YaRN without rounding; an MoE
            MLP whose biased router takes top-k then softmax, experts with biases and a clamped GLU.
    smollm3 llama whose every 4th layer skips RoPE (its q/k are not rotated).
    qwen3moe  qwen3 with a routed mixture-of-experts MLP (models/moe.py); top-k renormalised.
    qwen2moe  qwen2 with a routed MoE MLP plus a shared expert behind a sigmoid gate; top-k as routed.
    phi3    llama whose GGUF stores q/k/v and gate/up fused (attn_qkv, ffn_up), unpermuted; partial rotary
            (Phi-4-mini) and LongRoPE short/long factors are per-model numbers (ModelConfig, models/rope.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from haltwise.config import ModelConfig
from haltwise.errors import ModelLoadError


@dataclass(frozen=True)
class ArchOptions:
    name: str
    qkv_bias: bool = False             # q/k/v always carry biases (else only with HF attention_bias)
    qk_norm: bool = False              # RMSNorm over head_dim on q and k, before RoPE
    sandwich_norms: bool = False       # attention and MLP outputs are normed before the residual add
    norm_plus_one: bool = False        # RMSNorm output x (1 + w), computed in float32 (HF stores w)
    scale_embeddings: bool = False     # embeddings x sqrt(hidden_size), in the model dtype
    gguf_permuted_qk: bool = False     # llama.cpp's converter interleaved q/k rows for its RoPE
    # GGUF per-block tensor names that differ from Llama's mapping (GGUF name -> HF suffix).
    gguf_layer_names: dict[str, str] = field(default_factory=dict)
    # HF model_type values read as this family (config.json), besides `name`.
    hf_model_types: tuple[str, ...] = ()
    hf_tied_by_default: bool = False                # config.json without tie_word_embeddings
    # What a GGUF file leaves implicit (config.json states these itself):
    hidden_act: str = "silu"
    gguf_local_rope_theta: float | None = None      # RoPE base of sliding layers
    gguf_window_every: int | None = None            # every n-th layer is global, the rest slide
    gguf_norm_topk_prob: bool = False               # MoE: llama.cpp renormalises the top-k for this family
    gguf_no_rope_every: int | None = None           # every n-th layer (1-based) has no RoPE (llama.cpp's rule)
    o_bias: bool = False                            # the attention output projection has a bias
    attention_sinks: bool = False                   # a learned per-head logit in each softmax (row_attention.py)
    gguf_yarn_truncate: bool = True                 # YaRN rounds its correction range (transformers' default)
    gguf_expert_glu: tuple[float, float] | None = None  # gpt-oss experts' (alpha, limit), fixed by llama.cpp


# Gemma's four norms per layer, as llama.cpp names them (its ffn_norm is the pre-feedforward norm).
_GEMMA_NORMS = {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
                "post_ffw_norm": "post_feedforward_layernorm"}

ARCHITECTURES: dict[str, ArchOptions] = {
    "llama": ArchOptions("llama", gguf_permuted_qk=True, hf_model_types=("mistral",)),
    "qwen2": ArchOptions("qwen2", qkv_bias=True),
    "qwen3": ArchOptions("qwen3", qk_norm=True),
    "smollm3": ArchOptions("smollm3", gguf_permuted_qk=True, hf_tied_by_default=True, gguf_no_rope_every=4),
    "qwen3moe": ArchOptions("qwen3moe", qk_norm=True, hf_model_types=("qwen3_moe",), gguf_norm_topk_prob=True),
    "qwen2moe": ArchOptions("qwen2moe", qkv_bias=True, hf_model_types=("qwen2_moe",)),
    "phi3": ArchOptions("phi3", gguf_layer_names={"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}),
    "gemma2": ArchOptions(
        "gemma2", sandwich_norms=True, norm_plus_one=True, scale_embeddings=True, gguf_layer_names=_GEMMA_NORMS,
        hf_tied_by_default=True, hidden_act="gelu_pytorch_tanh", gguf_window_every=2),
    "gpt-oss": ArchOptions(
        "gpt-oss", qkv_bias=True, o_bias=True, attention_sinks=True, hf_model_types=("gpt_oss",),
        gguf_layer_names={"post_attention_norm": "post_attention_layernorm", "attn_sinks": "self_attn.sinks"},
        gguf_window_every=2, gguf_yarn_truncate=False, gguf_expert_glu=(1.702, 7.0)),
    "gemma3": ArchOptions(
        "gemma3", qk_norm=True, sandwich_norms=True, norm_plus_one=True, scale_embeddings=True,
        gguf_layer_names=_GEMMA_NORMS,
        hf_model_types=("gemma3_text",), hf_tied_by_default=True, hidden_act="gelu_pytorch_tanh",
        gguf_local_rope_theta=10000.0, gguf_window_every=6),
}


def arch_options(config: ModelConfig) -> ArchOptions:
    return ARCHITECTURES[config.architecture]


def family_of(name: str, where: str) -> ArchOptions:
    """The family a GGUF architecture or HF model_type names; ModelLoadError listing the supported ones."""
    for options in ARCHITECTURES.values():
        if name == options.name or name in options.hf_model_types:
            return options
    supported = sorted({n for o in ARCHITECTURES.values() for n in (o.name, *o.hf_model_types)})
    raise ModelLoadError(f"{where}: architecture {name!r} is not supported (supported: {', '.join(supported)})")


def window_pattern(num_layers: int, global_every: int) -> tuple[str, ...]:
    """Layer types where every `global_every`-th layer (1-based) is global and the others slide."""
    return tuple("full_attention" if (i + 1) % global_every == 0 else "sliding_attention"
                 for i in range(num_layers))
