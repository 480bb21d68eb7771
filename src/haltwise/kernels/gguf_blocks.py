"""The raw GGUF blocks of each fused linear, for formats that compute on the checkpoint's own bytes.

A quantized GGUF tensor is a (rows, bytes_per_row) uint8 block matrix: each row is one output
feature's weights, blocks of 32 (or 256) inputs each. Fusing q/k/v (and gate/up) stacks shards'
rows; un-permuting q/k for rotate_half RoPE permutes rows. Neither touches a block, so both are done
on the byte matrix and the kernels see the blocks exactly as stored:

    model.layers.N.self_attn.qkv_proj  = [attn_q (unpermuted), attn_k (unpermuted), attn_v]
    model.layers.N.self_attn.o_proj    = [attn_output]
    model.layers.N.mlp.gate_up_proj    = [ffn_gate, ffn_up]
    (phi3 stores both fused: qkv_proj = [attn_qkv], gate_up_proj = [ffn_up], rows already in that order)
    model.layers.N.mlp.down_proj       = [ffn_down]
    lm_head                            = [output]  or  [token_embd]  when the embedding is tied
    model.layers.N.mlp.experts.E.*     = expert E's rows of ffn_{gate,up,down}_exps (experts, out, in)

A linear with any shard that is not block-quantized (F32/F16/BF16) gets no entry. q/k rows are
unpermuted only for the architectures whose converter permutes them (llama); whatever the reader does,
the plan checks every format against the loaded float32 weights, so a mismatch would exclude the
native format rather than run it.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType

from haltwise.config import ModelConfig
from haltwise.kernels.formats import GGUFShard, LinearSource
from haltwise.architectures import ARCHITECTURES
from haltwise.gguf.file import GGUFFile
from haltwise.gguf.reader import hf_name, open_gguf, unpermute_qk

_FLOAT_TYPES = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}
# HF leaf -> (fused linear leaf, shard position)
_FUSED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
          "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}
_PARTS = {"qkv_proj": 3, "gate_up_proj": 2}
log = logging.getLogger("haltwise.kernels")


def block_rows(tensor, rows: int) -> np.ndarray:
    """A quantized ReaderTensor's data as a (rows, bytes_per_row) uint8 array (a view, no copy)."""
    data = np.asarray(tensor.data)
    return data.reshape(rows, -1).view(np.uint8)


def unpermute_block_rows(data: np.ndarray, n_heads: int) -> np.ndarray:
    """GGUF's interleaved q/k row order -> Hugging Face's, on whole rows of blocks (a copy)."""
    return unpermute_qk(torch.from_numpy(np.array(data)), n_heads).numpy()   # np.array: a writable copy


def linear_shards(reader: GGUFFile, config: ModelConfig) -> dict[str, list[GGUFShard]]:
    """Fused linear name (no '.weight') -> its shards in row order, for every all-quantized linear."""
    parts: dict[str, dict[int, GGUFShard]] = {}
    whole: set[str] = set()
    options = ARCHITECTURES.get(reader.metadata.get("general.architecture"))
    arch, permuted = (options.name, options.gguf_permuted_qk) if options else ("llama", False)
    for t in reader.tensors:
        qtype = GGMLQuantizationType(t.tensor_type)
        if len(t.shape) not in (2, 3) or qtype in _FLOAT_TYPES:
            continue
        try:
            name = hf_name(t.name, arch)
        except KeyError:
            continue
        if name is None or not name.endswith(".weight"):
            continue
        if len(t.shape) == 3:                               # stacked experts: one row slice each (views)
            rows, experts = int(t.shape[1]), int(t.shape[2])
            data = block_rows(t, rows * experts)
            for e in range(experts):
                module, _, leaf = name.replace("#", str(e)).removesuffix(".weight").rpartition(".")
                fused, index = _FUSED.get(leaf, (leaf, 0))
                parts.setdefault(f"{module}.{fused}", {})[index] = GGUFShard(qtype=qtype, rows=rows,
                                                                             data=data[e * rows:(e + 1) * rows])
            continue
        module = name.removesuffix(".weight")
        if module == "model.embed_tokens":
            if not config.tie_word_embeddings:
                continue
            module = "lm_head"
        rows = int(t.shape[1])                              # ggml lists dims fastest-first: (in, out)
        data = block_rows(t, rows)
        parent, _, leaf = module.rpartition(".")
        if leaf == "q_proj" and permuted:
            data = unpermute_block_rows(data, config.num_heads)
        elif leaf == "k_proj" and permuted:
            data = unpermute_block_rows(data, config.num_kv_heads)
        fused, index = _FUSED.get(leaf, (leaf, 0))
        key = f"{parent}.{fused}" if parent else fused
        if leaf in _PARTS:                                  # stored fused already (phi3's attn_qkv, ffn_up)
            whole.add(key)
        parts.setdefault(key, {})[index] = GGUFShard(qtype=qtype, data=data, rows=rows)
    out: dict[str, list[GGUFShard]] = {}
    for key, shards in parts.items():
        wanted = 1 if key in whole else _PARTS.get(key.rpartition(".")[2], 1)
        if len(shards) == wanted:                            # a float shard leaves the linear out
            out[key] = [shards[i] for i in range(wanted)]
    return out


def read_linear_shards(path: Path, config: ModelConfig) -> dict[str, list[GGUFShard]]:
    """linear_shards for a GGUF file on disk. The arrays map the file (read-only, no copy) except q/k."""
    return linear_shards(open_gguf(path), config)


def attach_gguf_blocks(sources: list[LinearSource], model_path: Path | None, config: ModelConfig) -> int:
    """Fill `source.gguf` for every source of a GGUF model that has raw blocks; returns how many.

    Never raises: a file the block reader cannot follow leaves the sources as they were (the plan
    then runs torch's formats only), and the reason is logged.
    """
    if model_path is None or Path(model_path).suffix != ".gguf":
        return 0
    try:
        shards = read_linear_shards(Path(model_path), config)
    except Exception as e:  # a malformed or unexpected file: the plan falls back, it does not crash
        log.warning("raw GGUF blocks unavailable for %s (%s: %s)", model_path, type(e).__name__, e)
        return 0
    attached = 0
    for source in sources:
        if source.gguf is None and source.name in shards:
            source.gguf = shards[source.name]
            attached += 1
    return attached
