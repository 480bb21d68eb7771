"""The newer families, converted by llama.cpp's own convert_hf_to_gguf.py, token-exact with transformers.

Each fixture (tests/models/converted.py) is a tiny random-weight float32 transformers model saved with a real
BPE tokenizer and the family's real chat template, then converted to f32 and q8_0 GGUFs. With --dtype float32
haltwise must produce transformers' greedy tokens, 32 of them, on 3 prompts, from the HF directory and from
the f32 GGUF; the q8_0 GGUF must load its quantized experts and agree on the first token.
"""
import math

import pytest
import torch

from haltwise.models.loader import load_model
from tests.models.converted import MOE_FAMILIES, SPECS, fixture, mxfp4_pack
from tests.models.paged_runner import greedy

pytestmark = pytest.mark.slow           # building a fixture runs the converter (~1 min each, then cached)
NEW_TOKENS = 32
PROMPT_LENGTHS = (5, 19, 44)
# phi3's LongRoPE set is fixed by max_model_len (models/rope.py): within its original window of 128 every prompt
# here and its 32 tokens stay inside it, so transformers picks the short factors for all of them too.
MAX_MODEL_LEN = {"phi3": 128}
PHI3_LONG_PROMPT = 150        # past the original window: transformers takes the long factors from the prefill on


@pytest.fixture(autouse=True)
def no_weight_cache(monkeypatch):
    monkeypatch.setenv("HALTWISE_WEIGHT_CACHE", "0")


def prompts(vocab: int) -> list[list[int]]:
    return [torch.randint(4, vocab, (n,), generator=torch.Generator().manual_seed(n)).tolist()
            for n in PROMPT_LENGTHS]


def transformers_greedy(model, ids: list[int]) -> tuple[list[int], torch.Tensor]:
    """(greedy tokens, the prefill's next-token logits)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=0, eos_token_id=None,
                             output_logits=True, return_dict_in_generate=True)
    return out.sequences[0, len(ids):].tolist(), out.logits[0][0]


@pytest.fixture(scope="module", params=sorted(SPECS))
def family(request):
    f = fixture(request.param)
    theirs = f.model()
    cases = [(ids, transformers_greedy(theirs, ids)) for ids in prompts(theirs.config.vocab_size)]
    return f, cases


@pytest.mark.parametrize("source", ["hf", "f32"])
def test_float32_greedy_equals_transformers(family, source):
    f, cases = family
    loaded = load_model(f.hf if source == "hf" else f.gguf("f32"), dtype="float32",
                        max_model_len=MAX_MODEL_LEN.get(f.arch))
    assert loaded.config.architecture == f.arch
    for ids, (want, want_logits) in cases:
        got, got_logits = greedy(loaded.model, ids, NEW_TOKENS, block_size=4)
        assert (got_logits - want_logits).abs().max() < 1e-4, f"{f.arch} {source}: prompt of {len(ids)} tokens"
        assert got == want, f"{f.arch} {source}: prompt of {len(ids)} tokens"


def test_q8_0_gguf_loads_quantized_weights(family):
    f, cases = family
    loaded = load_model(f.gguf("q8_0"), dtype="float32")
    exact = load_model(f.gguf("f32"), dtype="float32")
    pick = (lambda m: m.model.layers[1].mlp.experts[5].down_proj.weight) if f.arch in MOE_FAMILIES else \
        (lambda m: m.model.layers[1].mlp.down_proj.weight)
    q, w = pick(loaded.model), pick(exact.model)
    assert not torch.equal(q, w) and (q - w).abs().max() < 0.02 * w.abs().max()
    ids, (want, _) = cases[1]
    assert greedy(loaded.model, ids, 1, block_size=4)[0] == want[:1]


def test_gguf_config_reads_the_family(family):
    f, _ = family
    config = load_model(f.gguf("f32"), dtype="float32").config
    assert config.no_rope_layers == ((3,) if f.arch == "smollm3" else ())
    if f.arch == "gemma2":      # the converter writes the caps and the window; the alternation is llama.cpp's rule
        assert (config.attn_logit_softcapping, config.final_logit_softcapping, config.sliding_window) == (3.0, 5.0, 8)
        assert config.layer_types == ("sliding_attention", "full_attention") * 2
        assert config.rope_local_theta is None
    if f.arch not in MOE_FAMILIES:
        assert config.num_experts == 0
        return
    assert (config.num_experts, config.num_experts_per_tok, config.moe_intermediate_size) == (8, 2, 32)
    if f.arch == "gpt-oss":     # what GGUF leaves implicit comes from llama.cpp's rules for the family
        assert (config.moe_router, config.expert_glu) == ("topk_softmax", (1.702, 7.0))
        assert config.rope_scaling["truncate"] is False and config.rope_scaling["factor"] == 4.0
        assert config.layer_types == ("sliding_attention", "full_attention") * 2 and config.sliding_window == 8
        return
    assert config.norm_topk_prob == (f.arch == "qwen3moe")            # llama.cpp's rule per family
    assert config.shared_expert_intermediate_size == (48 if f.arch == "qwen2moe" else 0)


@pytest.mark.parametrize("source", ["hf", "f32"])
def test_phi3_long_factors_past_the_original_window(source):
    """With max_model_len past the original window (the file's default, 512) the long factors rotate every
    position, as transformers does for a sequence already longer than that window."""
    f = fixture("phi3")
    ids = torch.randint(4, 4000, (PHI3_LONG_PROMPT,), generator=torch.Generator().manual_seed(3)).tolist()
    want, want_logits = transformers_greedy(f.model(), ids)
    loaded = load_model(f.hf if source == "hf" else f.gguf("f32"), dtype="float32")
    assert loaded.max_model_len == 512
    got, got_logits = greedy(loaded.model, ids, NEW_TOKENS, block_size=4)
    assert (got_logits - want_logits).abs().max() < 1e-4
    assert got == want


def test_phi3_config_from_gguf_equals_config_json():
    """Partial rotary (rope.dimension_count 12 of 16) and the LongRoPE factors, window and attention factor
    read from the converter's GGUF as from config.json."""
    f = fixture("phi3")
    gguf, hf = (load_model(p, dtype="float32").config for p in (f.gguf("f32"), f.hf))
    assert gguf.rotary_dim == hf.rotary_dim == 12
    for config in (gguf, hf):
        rs = config.rope_scaling
        assert rs["rope_type"] == "longrope" and rs["original_max_position_embeddings"] == 128
        assert rs["long_factor"] == pytest.approx([1.0, 1.5, 2.5, 4.0, 7.0, 12.0])
        assert rs["short_factor"] == pytest.approx([1.0, 1.1, 1.3, 1.7, 2.2, 2.9])
    assert gguf.rope_scaling["attention_factor"] == pytest.approx((1 + math.log(4) / math.log(128)) ** 0.5)
    assert gguf.sliding_window is None and gguf.layer_types is None       # the converter writes window 0


def test_gpt_oss_mxfp4_experts_equal_transformers_dequantized():
    """The fixture's experts packed as OpenAI's MXFP4 checkpoints store them, converted by llama.cpp (MXFP4 GGUF
    tensors), read by haltwise: transformers with its own MXFP4 dequantization of the same blocks gives the same
    32 greedy tokens on every prompt."""
    from gguf import GGMLQuantizationType
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    from haltwise.gguf.reader import open_gguf

    f = fixture("gpt-oss")
    types = {t.name: GGMLQuantizationType(t.tensor_type) for t in open_gguf(f.gguf("mxfp4")).tensors}
    assert types["blk.1.ffn_gate_exps.weight"] == types["blk.1.ffn_down_exps.weight"] == GGMLQuantizationType.MXFP4
    theirs = f.model()
    with torch.no_grad():
        for layer in theirs.model.layers:
            for name in ("gate_up_proj", "down_proj"):
                p = getattr(layer.mlp.experts, name)
                dequantized = convert_moe_packed_tensors(*mxfp4_pack(p.data), dtype=torch.float32)
                assert not torch.equal(dequantized, p) and (dequantized - p).abs().max() < 0.3 * p.abs().max()
                p.copy_(dequantized)
    loaded = load_model(f.gguf("mxfp4"), dtype="float32")
    for ids in prompts(theirs.config.vocab_size):
        want, want_logits = transformers_greedy(theirs, ids)
        got, got_logits = greedy(loaded.model, ids, NEW_TOKENS, block_size=4)
        assert (got_logits - want_logits).abs().max() < 1e-4, f"prompt of {len(ids)} tokens"
        assert got == want, f"prompt of {len(ids)} tokens"
