"""Weights kept only as they run (issue 25): a GGUF model whose big tensors stay in the mapped file.

Under --dtype auto every linear runs a planned format (kernels/plan.py), most often natively on the
checkpoint's own blocks, so a float32 copy of a linear is only worth making for a format that multiplies
in float32 -- and for the plan's measuring and verification, one linear at a time (kernels/formats.py
LinearSource). The mapped load therefore:

  * leaves every nn.Linear weight a meta tensor and gives the model `load_linear_weight(name)`, which
    dequantizes that fused linear from the mapped file when asked (nothing is kept here);
  * replaces the token embedding by `QuantizedEmbedding`, which dequantizes only the rows a step looks up
    (a tied lm_head reads the same mapped blocks through the plan);
  * materializes the rest (norms, biases: a few hundred KiB) as float32 parameters.

Float32 and bfloat16 (`--dtype float32|bfloat16`, the oracle paths) keep loading everything eagerly.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from haltwise.gguf.dequant import dequantize
from haltwise.errors import ModelLoadError
from haltwise.gguf.reader import GGUFTensor, tensor_rows, tensor_values
from haltwise.models.weights import FUSED, split_name


class QuantizedEmbedding(nn.Module):
    """nn.Embedding over a GGUF tensor's rows as stored: forward dequantizes the looked-up rows only.

    rows: (vocab, bytes_per_row) uint8, a read-only view of the mapped file. Results equal nn.Embedding
    over the whole dequantized table (the same per-block arithmetic, gguf/dequant.py)."""

    def __init__(self, tensor: GGUFTensor):
        super().__init__()
        self.rows, self.qtype = tensor.data, tensor.qtype
        self.num_embeddings, self.embedding_dim = tensor.shape

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(T,) int64 -> (T, dim) float32."""
        ids = input_ids.reshape(-1).numpy()
        picked = np.take(self.rows, ids, axis=0)                              # (T, bytes_per_row) copy
        return dequantize(picked, self.qtype, (len(ids), self.embedding_dim)).reshape(*input_ids.shape, -1)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, mapped {self.qtype.name} rows"


class MappedLinears:
    """Fused linear name ("model.layers.0.self_attn.qkv_proj") -> its float32 (out, in) weight, dequantized
    from the mapped file on each call (q/k unpermuted, shards stacked in order)."""

    def __init__(self, parts: dict[str, list[GGUFTensor]]):
        self._parts = parts

    def __call__(self, name: str) -> torch.Tensor:
        pieces = [tensor_values(t) for t in self._parts[name]]
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)

    def rows(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """The float32 weights of output rows `ids` (ascending) of the fused linear: only those rows'
        blocks are dequantized. Equal to self(name)[ids]."""
        pieces, start = [], 0
        for t in self._parts[name]:
            local = ids[(ids >= start) & (ids < start + t.shape[0])] - start
            start += t.shape[0]
            if len(local):
                pieces.append(tensor_rows(t, local))
        return torch.cat(pieces)


def fused_linear(hf_name: str) -> tuple[str, int]:
    """'model.layers.0.self_attn.k_proj.weight' -> ('model.layers.0.self_attn.qkv_proj', 1): the module
    the tensor fills and its shard position there."""
    module, leaf, _ = split_name(hf_name)
    fused, shard = FUSED.get(leaf, (leaf, 0))
    return (f"{module}.{fused}" if module else fused), shard


def map_weights(model: nn.Module, tensors: list[GGUFTensor], path) -> None:
    """Give a meta-built model its mapped weights (see the module docstring). ModelLoadError names what is
    missing or misshapen."""
    config = model.config
    linears = {name: module for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    parts: dict[str, dict[int, GGUFTensor]] = {}
    rest: list[GGUFTensor] = []
    embedding = None
    for t in tensors:
        linear, shard = fused_linear(t.hf_name)
        if t.hf_name == "model.embed_tokens.weight":
            embedding = t
            if config.tie_word_embeddings:
                parts["lm_head"] = {0: t}
        elif linear in linears and t.hf_name.endswith(".weight"):
            if linear != "lm_head" or not config.tie_word_embeddings:   # a tied file's spare output copy
                parts.setdefault(linear, {})[shard] = t
        else:
            rest.append(t)
    if embedding is None or tuple(embedding.shape) != (config.vocab_size, config.hidden_size):
        raise ModelLoadError(f"{path}: token_embd.weight is missing or not ({config.vocab_size}, {config.hidden_size})")
    ordered: dict[str, list[GGUFTensor]] = {}
    for name, module in linears.items():
        shards = [parts.get(name, {})[i] for i in sorted(parts.get(name, {}))]
        shape = (sum(t.shape[0] for t in shards), shards[0].shape[1]) if shards else None
        if shape != tuple(module.weight.shape):          # a missing shard leaves rows short
            raise ModelLoadError(f"{path}: the weights of {name} are missing or misshapen")
        ordered[name] = shards
    unmapped = {f"{name}.weight" for name in linears} | {"model.embed_tokens.weight"}
    materialize(model, unmapped)
    try:
        model.load_weights(((t.hf_name, tensor_values(t)) for t in rest),
                           skip=lambda hf_name: hf_name == "model.embed_tokens.weight" or
                           (fused_linear(hf_name)[0] in linears and hf_name.endswith(".weight")))
    except ValueError as e:
        raise ModelLoadError(f"{path}: {e}") from None
    model.model.embed_tokens = QuantizedEmbedding(embedding)
    model.load_linear_weight = MappedLinears(ordered)


def materialize(model: nn.Module, skip: set[str] = frozenset()) -> None:
    """Replace meta parameters by uninitialised float32 CPU ones, except the names in `skip`.

    Not Module.to_empty: that goes through torch's meta-tensor reference implementations, whose first use
    imports torch._dynamo (~1.5 s of every start)."""
    for prefix, module in model.named_modules():
        for leaf, param in list(module.named_parameters(recurse=False)):
            name = f"{prefix}.{leaf}" if prefix else leaf
            if param.is_meta and name not in skip:
                setattr(module, leaf, nn.Parameter(torch.empty(param.shape, dtype=torch.float32, device="cpu"),
                                                   requires_grad=False))
