"""Mixture-of-experts layers in the native layer stack (models/native_decode.py, csrc/moe_block.cpp).

The MoE block alone against models/moe.py's SparseMoE (the float32 reference), routed-only (qwen3moe, renormalised
top-k), with qwen2moe's sigmoid-gated shared expert and gpt-oss's (biased top-k-then-softmax router, biased
clamped-GLU experts), on every ISA path this CPU runs; a row's bits alone and inside batches of every size
(other rows change which experts run, and on how many rows); then the whole stack on llama.cpp-converted tiny
qwen3moe / qwen2moe / gpt-oss models (tests/models/converted.py) against the Python layers,
and every step of the default path batch invariant: a sequence's logits are the same bits alone, beside 1, 3 or
7 others, and prefilled whole or in chunks.
"""
from dataclasses import replace

import pytest
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.kernels.formats import get
from haltwise.kernels.model_plan import plan_model
from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import GGUFNative
from haltwise.kernels.plan import bucket_index
from haltwise.models.loader import load_model
from haltwise.models.moe import ClampedGluExpert
from haltwise.models.native_decode import ACTIVATIONS, CLAMPED_GLU, NativeDecode, moe_block
from tests.models.converted import fixture
from tests.models.paged_runner import PagedRunner
from tests.models.test_moe import CONFIG, moe, planned_as_default
from tests.models.test_native_decode import TOLERANCE, decode_logits

pytestmark = pytest.mark.skipif(build.load() is None, reason=f"native kernels unavailable: {build.failure()}")
SHARED = replace(CONFIG, architecture="qwen2moe", shared_expert_intermediate_size=64, norm_topk_prob=False)
GPT_OSS = replace(CONFIG, architecture="gpt-oss", moe_router="topk_softmax", expert_glu=(1.702, 7.0),
                  norm_topk_prob=False)
# gpt-oss's inputs x 10: gate and up values of +-10s, so the GLU's clamps at +-7 bite in every run
SCALE = {"qwen3moe": 1.0, "qwen2moe": 1.0, "gpt-oss": 10.0}
ROWS = (1, 2, 3, 5, 8, 13, 33, 40)


@pytest.fixture(autouse=True)
def no_caches(monkeypatch):
    monkeypatch.setenv("HALTWISE_WEIGHT_CACHE", "0")
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")


def layer_of(config, seed):
    """moe(config) planned as the default path; gpt-oss's router scaled to its inputs x 10 so its logits spread
    over a few units (one-hot softmaxes would hide the router's order of top-k and softmax)."""
    layer = planned_as_default(moe(config, seed=seed))
    if config.moe_router == "topk_softmax":
        with torch.no_grad():
            layer.gate.weight.mul_(0.1 / SCALE[config.architecture])
    return layer


def native_block(layer, isa="auto"):
    expert = layer.experts[0]
    act = CLAMPED_GLU if isinstance(expert, ClampedGluExpert) else ACTIVATIONS[expert.hidden_act]
    return moe_block(build.load(), layer, act, isa)


@pytest.mark.parametrize("config", [CONFIG, SHARED, replace(CONFIG, norm_topk_prob=False), GPT_OSS],
                         ids=["qwen3moe", "qwen2moe-shared", "unnormalised", "gpt-oss"])
def test_moe_block_equals_the_python_layer(config):
    layer = layer_of(config, 3)
    x = torch.randn(40, config.hidden_size, generator=torch.Generator().manual_seed(1)) * SCALE[config.architecture]
    reference = layer(x)
    for isa in build.load().isas():
        ours = native_block(layer, isa).run(x, bucket_index(40))
        # the same experts' linears (float32-native); the router's dot order and SiLU's exp differ in last bits
        err = ((ours - reference).abs().max() / reference.abs().max()).item()
        assert err < 1e-5, f"{isa}: relative error {err:.2e}"


@pytest.mark.parametrize("config", [CONFIG, SHARED, GPT_OSS], ids=["qwen3moe", "qwen2moe-shared", "gpt-oss"])
def test_a_row_is_the_same_bits_alone_and_in_any_batch(config):
    layer = layer_of(config, 4)
    x = torch.randn(max(ROWS), config.hidden_size, generator=torch.Generator().manual_seed(2))
    x = x * SCALE[config.architecture]
    for isa in build.load().isas():
        block = native_block(layer, isa)
        together = block.run(x, bucket_index(len(x)))
        for rows in ROWS:
            for start in (0, 7):
                part = x[start:start + rows]
                got = block.run(part, bucket_index(part.shape[0]))
                assert torch.equal(got, together[start:start + part.shape[0]]), f"{isa}: {rows} rows from {start}"
        assert torch.equal(block.run(x.flip(0), bucket_index(len(x))), together.flip(0)), isa


def planned_fixture(arch, outtype):
    path = fixture(arch).gguf(outtype)
    model = load_model(path).model
    # qwen2moe's shared expert (width 48) has no Q8_0 kernel shape: it falls back to float32
    quant = outtype != "f32"
    plan_model(model, path, formats=[GGUFNative(), get("float32")] if quant else [get("float32")], use_cache=False)
    return model


@pytest.mark.parametrize("arch,outtype", [("qwen3moe", "f32"), ("qwen3moe", "q8_0"), ("qwen2moe", "f32"),
                                          ("qwen2moe", "q8_0"), ("gpt-oss", "f32"), ("gpt-oss", "q8_0"),
                                          ("gpt-oss", "mxfp4")])
def test_native_stack_equals_python_moe_layers(arch, outtype):
    quant = outtype != "f32"          # q8_0, mxfp4: native blocks x q8 activations
    model = planned_fixture(arch, outtype)
    for isa in build.load().isas():
        stack, why = NativeDecode.build(model.model, isa)
        assert stack is not None, why
        assert all(stack.bucket_ok)
        ours, reference = decode_logits(model, stack), decode_logits(model, None)
        for step, (a, b) in enumerate(zip(ours, reference)):
            err = ((a - b).abs().max() / b.abs().max()).item()
            assert err < TOLERANCE[Q.Q8_0 if quant else None], f"{isa} step {step}: relative error {err:.2e}"


OTHERS = [[(11 * i + 7 * j) % 300 + 4 for j in range(5 + 3 * i)] for i in range(1, 8)]
TARGET = [(5 * j + 3) % 300 + 4 for j in range(17)]


def target_logits(model, others: int, chunk: int | None) -> list[torch.Tensor]:
    """Logits of TARGET's last prompt row and 6 greedy decodes, with `others` sequences in every step
    (their prompts prefilled in the target's first step, then decoding beside it); chunk: the target's
    prompt prefilled in chunks of this many rows (None: whole)."""
    seqs = list(range(others + 1))
    prompts = [TARGET] + OTHERS[:others]
    runner = PagedRunner(model, len(seqs), 64, block_size=4)
    pieces = [TARGET[i:i + chunk] for i in range(0, len(TARGET), chunk)] if chunk else [TARGET]
    done, tokens = 0, []
    for n, piece in enumerate(pieces):
        if n == 0 and others:
            logits = runner.step(seqs, [piece, *prompts[1:]], [0] * len(seqs))
            tokens = [int(row.argmax()) for row in logits]
        else:
            logits = runner.step([0], [piece], [done])
        done += len(piece)
    out, lens = [logits[0]], [len(p) for p in prompts]
    tokens = [int(logits[0].argmax()), *tokens[1:]]
    for _ in range(6):
        logits = runner.step(seqs, [[t] for t in tokens], lens)
        lens = [n + 1 for n in lens]
        tokens = [int(row.argmax()) for row in logits]
        out.append(logits[0])
    return out


@pytest.mark.parametrize("arch,outtype", [("qwen3moe", "q8_0"), ("qwen2moe", "q8_0"), ("gpt-oss", "q8_0"),
                                          ("gpt-oss", "mxfp4")])
def test_default_path_steps_are_batch_invariant(arch, outtype):
    """The plan of the default path (one batch-invariant format per linear), the stack on every step."""
    path = fixture(arch).gguf(outtype)
    model = load_model(path).model
    plan_model(model, path, batch_invariant=True, use_cache=False)
    stack, why = NativeDecode.build(model.model, every_step=True, head=model.lm_head)
    assert stack is not None and stack.every_step, why
    model.model.native_decode = stack
    alone = target_logits(model, 0, None)
    for others, chunk in ((1, None), (3, 5), (7, None), (0, 4), (0, 1)):
        got = target_logits(model, others, chunk)
        for step, (a, b) in enumerate(zip(got, alone)):
            assert torch.equal(a, b), f"beside {others}, chunks of {chunk}: step {step} differs"
    assert model.model.layers_run == 0 and stack.stack.beats > 0     # every step ran in the stack


def test_gpt_oss_router_ties_go_to_the_lower_expert_index():
    """Experts 1 and 6 get the same router row and bias (equal logits on every token) but different weights: where
    only one of the two makes the top k, the block runs expert 1, on every ISA path."""
    layer = layer_of(GPT_OSS, 5)
    with torch.no_grad():
        layer.gate.weight[6] = layer.gate.weight[1]
        layer.gate.bias[6] = layer.gate.bias[1]
    x = torch.randn(40, GPT_OSS.hidden_size, generator=torch.Generator().manual_seed(3)) * 10
    logits = layer.gate(x)
    want = []
    for t in range(len(x)):                 # top-k by (falling logit, rising index), softmax over the k
        picks = sorted(range(GPT_OSS.num_experts), key=lambda e: (-logits[t, e].item(), e))[:layer.top_k]
        weights = torch.softmax(logits[t, picks], dim=-1)
        want.append(sum(w * layer.experts[e](x[t:t + 1])[0] for w, e in sorted(zip(weights, picks),
                                                                            key=lambda pair: pair[1])))
    want = torch.stack(want)
    split = [t for t in range(len(x)) if (1 in _top(logits[t], layer.top_k)) != (6 in _top(logits[t], layer.top_k))]
    assert split, "no token has exactly one of the tied experts in its top k"
    for isa in build.load().isas():
        got = native_block(layer, isa).run(x, bucket_index(len(x)))
        err = ((got - want).abs().max() / want.abs().max()).item()
        assert err < 1e-5, f"{isa}: relative error {err:.2e}"


def _top(row: torch.Tensor, k: int) -> list[int]:
    return sorted(range(len(row)), key=lambda e: (-row[e].item(), e))[:k]
