"""Read a local Hugging Face Llama directory: config.json, safetensors (single or sharded),
generation_config.json. Nothing is ever fetched from a hub."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import torch
from safetensors import safe_open

from haltwise.config import ModelConfig
from haltwise.models.errors import ModelLoadError

SUPPORTED_MODEL_TYPES = ("llama",)


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


def _rope(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, rope_scaling or None) from either the legacy keys or transformers 5 `rope_parameters`."""
    params = dict(cfg.get("rope_parameters") or {})
    theta = float(params.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
    scaling = cfg.get("rope_scaling") or params or None
    if scaling:
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        scaling = None if kind == "default" else {k: v for k, v in scaling.items() if k != "rope_theta"}
    return theta, scaling


def hf_config(directory: Path) -> ModelConfig:
    """ModelConfig from config.json; ModelLoadError for a missing file or non-Llama model_type."""
    cfg = _read_json(directory / "config.json")
    if cfg.get("model_type") not in SUPPORTED_MODEL_TYPES:
        raise ModelLoadError(f"{directory}: model_type {cfg.get('model_type')!r} is not supported "
                             f"(supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    try:
        hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        theta, scaling = _rope(cfg)
        return ModelConfig(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            max_position_embeddings=int(cfg["max_position_embeddings"]),
            rope_theta=theta,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            rope_scaling=scaling,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=_ids(cfg.get("eos_token_id")),
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
