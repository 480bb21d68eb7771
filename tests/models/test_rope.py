"""Rope frequencies and cos/sin tables equal transformers' for each rope type."""
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from haltwise.config import ModelConfig
from haltwise.models.rope import (RotaryEmbedding, apply_rotary, max_supported_len, rope_parameters, rope_type_of,
                                  rotate_half)

WINDOW, HEAD_DIM, THETA = 512, 64, 50000.0
SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": WINDOW},
    "yarn_mscale": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 256,
                    "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 16, "beta_slow": 2},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 128},
    # Phi-3: the short factors up to the original window, the long ones past it (seq_len here = the table's length)
    "longrope": {"rope_type": "longrope", "original_max_position_embeddings": 128,
                 "short_factor": [1.0 + 0.05 * i for i in range(HEAD_DIM // 2)],
                 "long_factor": [1.0 + 0.9 * i for i in range(HEAD_DIM // 2)]},
}


def hf_config(scaling):
    params = {"rope_type": "default", "rope_theta": THETA} if scaling is None else {**scaling, "rope_theta": THETA}
    return LlamaConfig(hidden_size=4 * HEAD_DIM, num_attention_heads=4, head_dim=HEAD_DIM,
                       max_position_embeddings=WINDOW, rope_parameters=params)


@pytest.mark.parametrize("name", list(SCALINGS))
@pytest.mark.parametrize("seq_len", [1, WINDOW, 3 * WINDOW + 7])
def test_inv_freq_matches_transformers(name, seq_len):
    scaling = SCALINGS[name]
    kind = rope_type_of(scaling)
    cfg = hf_config(scaling)
    if kind == "default":
        want, want_scale = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        want, want_scale = ROPE_INIT_FUNCTIONS[kind](cfg, None, seq_len=seq_len)
    got, scale = rope_parameters(HEAD_DIM, THETA, scaling, WINDOW, seq_len=seq_len)
    assert torch.equal(got, want)
    assert scale == want_scale


@pytest.mark.parametrize("name", [n for n in SCALINGS if n != "dynamic"])
def test_tables_match_transformers_forward(name):
    scaling = SCALINGS[name]
    max_len = 3 * WINDOW
    ours = RotaryEmbedding(HEAD_DIM, THETA, scaling, WINDOW, max_len)
    theirs = LlamaRotaryEmbedding(hf_config(scaling))
    positions = torch.tensor([[0, 1, 5, 511, 512, 900, max_len - 1]])
    cos, sin = theirs(torch.zeros(1, dtype=torch.float32), positions)
    assert torch.equal(ours.cos[positions[0]], cos[0])
    assert torch.equal(ours.sin[positions[0]], sin[0])
    if name.startswith("yarn"):
        assert ours.attention_scaling != 1.0


@pytest.mark.parametrize("lengths", [[40], [WINDOW], [WINDOW + 1], [3 * WINDOW - 5], [40, 2 * WINDOW + 3, 7]])
def test_dynamic_is_per_sequence_like_transformers(lengths):
    """Each sequence's rows get the NTK base for its own length: unscaled within the window."""
    scaling = SCALINGS["dynamic"]
    ours = RotaryEmbedding(HEAD_DIM, THETA, scaling, WINDOW, 3 * WINDOW)
    positions = torch.cat([torch.arange(n) for n in lengths])
    starts = [0]
    for n in lengths:
        starts.append(starts[-1] + n)
    meta = SimpleNamespace(query_start_loc=starts, seq_lens=lengths, rope_seq_lens=None)
    cos, sin = ours(positions, meta)
    for s, n in enumerate(lengths):
        theirs = LlamaRotaryEmbedding(hf_config(scaling))        # a fresh model per prompt, as generate() sees
        want_cos, want_sin = theirs(torch.zeros(1), torch.arange(n)[None])
        assert torch.equal(cos[starts[s]:starts[s + 1], 0], want_cos[0])
        assert torch.equal(sin[starts[s]:starts[s + 1], 0], want_sin[0])
    if lengths == [40]:
        default = RotaryEmbedding(HEAD_DIM, THETA, None, WINDOW, WINDOW)
        assert torch.equal(cos[:, 0], default.cos[:40])


def test_dynamic_decode_past_the_window_uses_its_length():
    """A decode row at position p (context p + 1) is rotated as transformers' step with seq_len p + 1."""
    scaling = SCALINGS["dynamic"]
    ours = RotaryEmbedding(HEAD_DIM, THETA, scaling, WINDOW, 3 * WINDOW)
    theirs = LlamaRotaryEmbedding(hf_config(scaling))
    p = 2 * WINDOW + 10
    cos, _ = ours(torch.tensor([p]), SimpleNamespace(query_start_loc=[0, 1], seq_lens=[p + 1], rope_seq_lens=None))
    want, _ = theirs(torch.zeros(1), torch.tensor([[p]]))
    assert torch.equal(cos[0, 0], want[0, 0])


def test_apply_is_hf_rotate_half():
    rope = RotaryEmbedding(8, 10000.0, None, 64, 64)
    q, k = torch.randn(3, 2, 8), torch.randn(3, 1, 8)
    pos = torch.tensor([0, 7, 63])
    cos, sin = rope(pos)
    rq, rk = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    assert torch.equal(rq[0], q[0]) and torch.equal(rk[0], k[0])        # position 0: identity
    assert torch.equal(cos, rope.cos[pos][:, None]) and torch.equal(sin, rope.sin[pos][:, None])
    assert torch.allclose(rq, q * cos + torch.cat([-q[..., 4:], q[..., :4]], -1) * sin)
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5)   # a rotation
    assert torch.equal(rotate_half(torch.arange(4.0)), torch.tensor([-2.0, -3.0, 0.0, 1.0]))


def test_max_supported_len():
    cfg = ModelConfig(vocab_size=10, hidden_size=64, intermediate_size=8, num_layers=1, num_heads=4,
                      num_kv_heads=4, head_dim=16, max_position_embeddings=WINDOW)
    assert max_supported_len(cfg) == WINDOW
    assert max_supported_len(cfg, SCALINGS["linear"]) == 4 * WINDOW
    assert max_supported_len(cfg, SCALINGS["dynamic"]) == 2 * WINDOW
    assert max_supported_len(cfg, SCALINGS["yarn_mscale"]) == 8 * 256     # factor x original window
    assert max_supported_len(cfg, {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128}) == WINDOW
    assert max_supported_len(cfg, SCALINGS["llama3"]) == 8 * 128


def test_unknown_rope_type():
    with pytest.raises(ValueError, match="proportional"):
        rope_type_of({"rope_type": "proportional"})


def test_partial_rotary_passes_the_trailing_dims_through():
    """rotary_dim 48 of 64 (Phi-4-mini's 0.75): the leading dims as a 48-dim rope, the rest untouched."""
    full = RotaryEmbedding(HEAD_DIM, THETA, None, WINDOW, 32, rotary_dim=48)
    small = RotaryEmbedding(48, THETA, None, WINDOW, 32)
    assert torch.equal(full.cos[:, :48], small.cos) and torch.equal(full.sin[:, :48], small.sin)
    assert torch.equal(full.cos[:, 48:], torch.ones(32, 16)) and torch.equal(full.sin[:, 48:], torch.zeros(32, 16))
    x = torch.randn(5, 3, HEAD_DIM)
    cos, sin = full(torch.arange(5))
    got = apply_rotary(x, cos, sin, 48)
    assert torch.equal(got[..., 48:], x[..., 48:])
    assert torch.equal(got[..., :48], apply_rotary(x[..., :48], *small(torch.arange(5))))
