"""gguf_blocks: every fused linear's raw blocks decode to exactly the weights the model loads."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from haltwise.gguf.file import GGUFFile
from gguf import quants

from haltwise.kernels.gguf_blocks import linear_shards, unpermute_block_rows
from haltwise.gguf import reader as gguf_reader
from haltwise.gguf.reader import unpermute_qk
from haltwise.models.loader import default_model_path, load_model


@pytest.fixture(scope="module")
def smollm2_float32():
    return load_model(default_model_path(), dtype="float32", rope_scaling=None, max_model_len=256)


def test_unpermute_on_block_rows_is_the_weight_permutation() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((2 * 64, 64)).astype(np.float32)            # 2 heads of 64 rows
    data = quants.quantize(w, Q.Q8_0)                                    # (128, 68) bytes
    ours = quants.dequantize(unpermute_block_rows(data, 2), Q.Q8_0)
    theirs = unpermute_qk(torch.from_numpy(quants.dequantize(data, Q.Q8_0)), 2).numpy()
    assert np.array_equal(ours, theirs)


def test_smollm2_shards_decode_to_the_loaded_weights(smollm2_float32) -> None:
    model, config = smollm2_float32.model, smollm2_float32.config
    shards = linear_shards(GGUFFile(default_model_path()), config)
    linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert set(shards) == set(linears)                                   # 4 per layer + lm_head
    assert [s.qtype for s in shards["model.layers.0.self_attn.qkv_proj"]] == [Q.Q4_1] * 3
    assert [s.qtype for s in shards["lm_head"]] == [Q.Q8_0]             # tied Q8_0 token_embd
    for name, linear in linears.items():
        parts = [quants.dequantize(s.data, s.qtype).reshape(s.rows, -1) for s in shards[name]]
        assert torch.equal(torch.from_numpy(np.concatenate(parts)), linear.weight.detach()), name


def test_float_tensors_get_no_shards(smollm2_float32) -> None:
    """A linear with a float shard (here: pretend attn_v is F32) is left to the torch formats."""
    reader = GGUFFile(default_model_path())
    reader.tensors = [dataclasses.replace(t, tensor_type=Q.F32) if t.name == "blk.0.attn_v.weight" else t for t in reader.tensors]
    shards = linear_shards(reader, smollm2_float32.config)
    assert "model.layers.0.self_attn.qkv_proj" not in shards
    assert "model.layers.1.self_attn.qkv_proj" in shards
    assert gguf_reader.hf_name("blk.0.attn_v.weight") == "model.layers.0.self_attn.v_proj.weight"
