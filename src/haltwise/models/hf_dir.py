"""Read a local Hugging Face model directory: config.json, safetensors (single or sharded),
generation_config.json. Nothing is ever fetched from a hub."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors import safe_open

from haltwise.config import ModelConfig
from haltwise.architectures import ArchOptions, family_of, window_pattern
from haltwise.errors import ModelLoadError


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{path}: cannot read JSON ({e})") from None


def _ids(value: Any) -> tuple[int, ...]:
    """An eos field (int, list of ints or None) -> tuple."""
    if value is None:
        return ()
    return tuple(int(v) for v in (value if isinstance(value, list) else [value]))


def _scaling(params: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any] | None:
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return None
    scaling = {k: v for k, v in params.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if kind in ("su", "longrope"):                      # Phi-3's early configs say "su"; the window may be top-level
        scaling = {**scaling, "rope_type": "longrope"}
        scaling.pop("type", None)
        scaling.setdefault("original_max_position_embeddings", cfg.get("original_max_position_embeddings"))
    return scaling


def _rotary_dim(cfg: dict[str, Any], head_dim: int) -> int | None:
    """Dims of each head RoPE rotates (partial_rotary_factor, in rope_parameters or top-level); None = all."""
    factor = (cfg.get("rope_parameters") or {}).get("partial_rotary_factor") or cfg.get("partial_rotary_factor")
    dim = int(head_dim * float(factor)) if factor else head_dim
    return None if dim == head_dim else dim


def _rope(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None, float | None]:
    """(rope_theta, rope_scaling or None, local theta or None) from the legacy keys or transformers 5's
    `rope_parameters` (flat, or per layer type {"full_attention": {...}, "sliding_attention": {...}})."""
    params = dict(cfg.get("rope_parameters") or {})
    local = cfg.get("rope_local_base_freq")
    if "full_attention" in params:
        local = params.get("sliding_attention", {}).get("rope_theta", local)
        params = dict(params["full_attention"])
    theta = float(params.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
    scaling = cfg.get("rope_scaling") or params or None
    return theta, _scaling(scaling, cfg) if scaling else None, None if local is None else float(local)


def _windows(cfg: dict[str, Any], options: ArchOptions, layers: int) -> tuple[int | None, tuple[str, ...] | None]:
    """(sliding_window, layer_types) as transformers derives them for each family's config class."""
    window = cfg.get("sliding_window")
    if cfg.get("use_sliding_window") is False:          # qwen2 / qwen3: the window is off unless enabled
        window = None
    if window is None:
        return None, None
    if cfg.get("layer_types"):
        return int(window), tuple(cfg["layer_types"])
    if options.gguf_window_every:                       # gemma3: sliding_window_pattern
        return int(window), window_pattern(layers, int(cfg.get("sliding_window_pattern", options.gguf_window_every)))
    first = int(cfg.get("max_window_layers", 0)) if "max_window_layers" in cfg else 0
    return int(window), tuple("sliding_attention" if i >= first else "full_attention" for i in range(layers))


def _experts(cfg: dict[str, Any], layers: int, options: ArchOptions) -> dict[str, Any]:
    """The MoE fields of ModelConfig ({} for a dense model): as transformers' Qwen MoE decoder layers decide,
    a layer is sparse unless listed in mlp_only_layers or off the decoder_sparse_step grid."""
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")     # transformers 5 saves the latter
    if not experts:
        return {}
    step = int(cfg.get("decoder_sparse_step", 1))
    dense = {int(i) for i in cfg.get("mlp_only_layers") or ()} | {i for i in range(layers) if (i + 1) % step}
    glu = options.gguf_expert_glu            # gpt-oss: experts as wide as intermediate_size, a clamped GLU
    if glu is not None:
        glu = (float(cfg.get("swiglu_alpha", glu[0])), float(cfg.get("swiglu_limit", glu[1])))
    return dict(num_experts=int(experts), num_experts_per_tok=int(cfg["num_experts_per_tok"]),
                moe_intermediate_size=int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"]),
                moe_router="topk_softmax" if glu else "softmax_topk", expert_glu=glu,
                norm_topk_prob=bool(cfg.get("norm_topk_prob", False)),
                shared_expert_intermediate_size=int(cfg.get("shared_expert_intermediate_size") or 0),
                mlp_only_layers=tuple(sorted(dense)))


def hf_config(directory: Path) -> ModelConfig:
    """ModelConfig from config.json; ModelLoadError for a missing file or unsupported model_type."""
    cfg = _read_json(directory / "config.json")
    options = family_of(cfg.get("model_type"), str(directory))
    try:
        hidden, heads, layers = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"])
        theta, scaling, local = _rope(cfg)
        window, layer_types = _windows(cfg, options, layers)
        softcap = cfg.get("final_logit_softcapping")
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        return ModelConfig(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            max_position_embeddings=int(cfg["max_position_embeddings"]),
            rope_theta=theta,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", options.hf_tied_by_default)),
            rope_scaling=scaling,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=_ids(cfg.get("eos_token_id")),
            architecture=options.name,
            qkv_bias=options.qkv_bias or bool(cfg.get("attention_bias", False)),
            hidden_act=cfg.get("hidden_activation") or cfg.get("hidden_act") or options.hidden_act,
            sliding_window=window,
            layer_types=layer_types,
            rope_local_theta=local if window is not None else None,
            query_pre_attn_scalar=cfg.get("query_pre_attn_scalar"),
            final_logit_softcapping=None if softcap is None else float(softcap),
            attn_logit_softcapping=None if cfg.get("attn_logit_softcapping") is None
            else float(cfg["attn_logit_softcapping"]),
            rotary_dim=_rotary_dim(cfg, head_dim),
            # smollm3: no_rope_layers[i] is 1 where layer i uses RoPE
            no_rope_layers=tuple(i for i, use in enumerate(cfg.get("no_rope_layers") or ()) if not use),
            **_experts(cfg, layers, options),
        )
    except KeyError as e:
        raise ModelLoadError(f"{directory}/config.json: missing key {e}") from None


def generation_eos_ids(directory: Path) -> tuple[int, ...]:
    """eos_token_id of generation_config.json, or () when there is none."""
    path = directory / "generation_config.json"
    return _ids(_read_json(path).get("eos_token_id")) if path.is_file() else ()


def safetensors_files(directory: Path) -> list[Path]:
    """The weight files: the shards named by model.safetensors.index.json, else every *.safetensors."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(_read_json(index).get("weight_map", {}).values()))
        files = [directory / s for s in shards]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ModelLoadError(f"{directory}: shards listed in {index.name} are missing: {', '.join(missing)}")
    else:
        files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{directory}: no *.safetensors weights (only safetensors are loaded)")
    return files


def hf_weights(directory: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor of every weight file, one at a time, in the file's dtype."""
    for file in safetensors_files(directory):
        with safe_open(file, framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
