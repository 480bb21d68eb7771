"""The native layer stack (models/native_decode.py) computes what the Python layers compute.

Every family (sandwich norms, (1 + w) norms, q/k head norms, biases, GELU, sliding windows with local
RoPE), float32 weights and raw Q8_0 blocks, each ISA path this CPU runs: two sequences of different
lengths decode together over 4-token blocks, past the sliding window, once through the stack and once
through the Python layers (each with its own cache), fed the same tokens; logits agree at every step.
"""
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.formats import get
from haltwise.kernels.model_plan import plan_model
from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import GGUFNative
from haltwise.models.loader import load_model
from haltwise.models.native_decode import NativeDecode
from tests.models.families import FAMILIES, VOCAB, WINDOW, hf_model, write_gguf
from tests.models.paged_runner import PagedRunner

pytestmark = pytest.mark.skipif(build.load() is None, reason=f"native kernels unavailable: {build.failure()}")
PROMPTS = [torch.randint(4, VOCAB, (n,), generator=torch.Generator().manual_seed(n)).tolist() for n in (2 * WINDOW + 3, 5)]
DECODES = WINDOW + 6
# max |logit difference| / max |logit|. float32 weights: the same sums in another order. Q8_0: both paths
# quantize activations to int8, and a last-bit difference in an input can move one rounding step (1/254),
# which later layers carry on: the bound is the model's, 2.5x the native format's per-linear bound (up to
# 0.021 measured here over 6 Gemma layers).
TOLERANCE = {None: 1e-4, Q.Q8_0: 2.5 * GGUFNative.tolerance}


@pytest.fixture(autouse=True)
def no_caches(monkeypatch):
    monkeypatch.setenv("HALTWISE_WEIGHT_CACHE", "0")
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")


def planned_model(tmp_path, family, quant):
    theirs = hf_model(family, seed=2, **({"query_pre_attn_scalar": 16} if family == "gemma3" else {}))
    path = write_gguf(theirs, family, tmp_path / f"{family}.gguf", quant=quant)
    model = load_model(path).model
    plan_model(model, path, formats=[GGUFNative()] if quant else [get("float32")], use_cache=False)
    return model


def decode_logits(model, stack: NativeDecode | None) -> list[torch.Tensor]:
    """Prefill both prompts (Python layers), then DECODES two-row decode steps fed token 4 + step."""
    model.model.native_decode = None
    runner = PagedRunner(model, num_seqs=2, max_len=max(map(len, PROMPTS)) + DECODES, block_size=4)
    for s, prompt in enumerate(PROMPTS):
        runner.step([s], [prompt], [0])
    model.model.native_decode = stack
    out = []
    for i in range(DECODES):
        out.append(runner.step([0, 1], [[4 + i], [5 + i]], [len(p) + i for p in PROMPTS]))
    model.model.native_decode = None
    return out


@pytest.mark.parametrize("quant", [None, Q.Q8_0], ids=["float32", "q8_0"])
@pytest.mark.parametrize("family", FAMILIES)
def test_native_stack_equals_python_layers(tmp_path, family, quant):
    model = planned_model(tmp_path, family, quant)
    for isa in build.load().isas():
        stack, why = NativeDecode.build(model.model, isa)
        assert stack is not None, why
        formats = {l.bucket_formats[1] for layer in model.model.layers
                   for l in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj, layer.mlp.down_proj)}
        assert formats == {GGUFNative.name if quant else "float32"} and stack.bucket_ok[1]
        ours, reference = decode_logits(model, stack), decode_logits(model, None)
        for step, (a, b) in enumerate(zip(ours, reference)):
            err = ((a - b).abs().max() / b.abs().max()).item()
            assert err < TOLERANCE[quant], f"{isa} step {step}: relative error {err:.2e}"


def test_stack_is_used_only_for_decode_only_steps(tmp_path):
    model = planned_model(tmp_path, "llama", None)
    stack, _ = NativeDecode.build(model.model)
    calls = []
    real_run = stack.run
    stack.run = lambda *a: calls.append(a[0].shape[0]) or real_run(*a)
    model.model.native_decode = stack
    runner = PagedRunner(model, num_seqs=2, max_len=64, block_size=4)
    runner.step([0], [PROMPTS[1]], [0])                         # prefill: Python layers
    runner.step([0, 1], [[7], PROMPTS[1]], [5, 0])              # decode + prefill: Python layers
    runner.step([0, 1], [[8], [9]], [6, 5])                     # decodes only: the stack
    assert calls == [2]


def test_unplanned_model_has_no_stack(tmp_path):
    theirs = hf_model("llama", seed=2)
    model = load_model(write_gguf(theirs, "llama", tmp_path / "l.gguf")).model
    stack, why = NativeDecode.build(model.model)
    assert stack is None and "not planned" in why


def _stack_args(model, bad: str):
    """One decode row (position 5) of a 2-block sequence, as NativeDecode.run passes it, with one field made bad."""
    cfg = model.config
    num_blocks, block_size, D = 4, 4, cfg.head_dim
    caches = [torch.zeros(num_blocks, block_size, cfg.num_kv_heads, D) for _ in range(cfg.num_layers)]
    table = torch.tensor([[2, 3]], dtype=torch.long)
    slot = torch.tensor([3 * block_size + 1], dtype=torch.long)      # position 5: block 1 of the table, offset 1
    lens = torch.tensor([6], dtype=torch.long)
    if bad == "block":
        table = torch.tensor([[2, 1_000_000]], dtype=torch.long)
    elif bad == "negative_block":
        table = torch.tensor([[-7, 3]], dtype=torch.long)
    elif bad == "slot":
        slot = torch.tensor([num_blocks * block_size + 100], dtype=torch.long)
    elif bad == "length":
        lens = torch.tensor([9 * block_size], dtype=torch.long)       # beyond the table's 2 blocks
    cos, sin = torch.ones(1, D), torch.zeros(1, D)
    h = torch.randn(1, cfg.hidden_size)
    return h, cos, sin, caches, slot, table, lens


@pytest.mark.parametrize("bad", ["block", "negative_block", "slot", "length"])
def test_a_bad_block_table_slot_or_length_is_a_python_error_not_a_stray_write(tmp_path, bad):
    """decode_stack.cpp checks every index it will use before the first write (check_bounds); without it a
    block id of 1,000,000 reads 60 MB past the cache and a bad slot writes there (a crash at best)."""
    model = planned_model(tmp_path, "llama", None)
    stack, why = NativeDecode.build(model.model)
    assert stack is not None, why
    h, cos, sin, caches, slot, table, lens = _stack_args(model, "none")
    ok = stack.stack.forward(h.clone(), 1, cos, sin, cos, sin, caches, [c.clone() for c in caches], slot, table, slot,
                             table, lens)
    assert torch.isfinite(ok).all()
    h, cos, sin, caches, slot, table, lens = _stack_args(model, bad)
    before = [c.clone() for c in caches]
    with pytest.raises(RuntimeError, match="haltwise native: row 0: .* is outside"):
        stack.stack.forward(h, 1, cos, sin, cos, sin, caches, [c.clone() for c in caches], slot, table, slot, table,
                            lens)
    assert all(torch.equal(a, b) for a, b in zip(caches, before)), "the cache was written before the check"
