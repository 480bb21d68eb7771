"""The default path (--dtype auto: planned linears) on the converted families, on the converter's q8_0 file.

phi3 (partial rotary, LongRoPE tables), qwen3moe, qwen2moe and gpt-oss (MoE blocks: csrc/moe_block.cpp; gpt-oss's
attention sinks) run the native layer stack every step: close to the float32 Python layers on the same file.
gemma2 (soft-capped attention) cannot and runs the Python layers with the planned linears. Either way a sequence's
logits are the same bits however its prompt is chunked or batched, as tests/models/test_native_stack_rows.py
checks for the hand-written families."""
import pytest
import torch

from haltwise.kernels.formats import get
from haltwise.kernels.model_plan import plan_model
from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import GGUFNative
from haltwise.models.loader import load_model
from haltwise.models.native_decode import NativeDecode
from tests.models.converted import fixture
from tests.models.paged_runner import PagedRunner
from tests.models.test_native_stack_rows import _prompt, _prompt_logits

pytestmark = pytest.mark.slow
NATIVE_FAMILIES = ("phi3", "qwen3moe", "qwen2moe", "gpt-oss")
PYTHON_FAMILIES = {"gemma2": "soft-capping"}   # on the Python layers, and why


@pytest.fixture(autouse=True)
def no_caches(monkeypatch):
    monkeypatch.setenv("HALTWISE_WEIGHT_CACHE", "0")
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    assert build.load() is not None, build.failure()


def _models(arch):
    """(the q8_0 file planned as the default path plans it -- with the every-step stack where the family runs
    it --, the same file in plain float32 Python layers)."""
    path = fixture(arch).gguf("q8_0")
    planned, reference = load_model(path, max_model_len=64).model, load_model(path, max_model_len=64).model
    plan_model(planned, path, formats=[GGUFNative(), get("float32-native")], use_cache=False, batch_invariant=True)
    stack, why = NativeDecode.build(planned.model, every_step=True, head=planned.lm_head)
    if arch in PYTHON_FAMILIES:
        assert stack is None and PYTHON_FAMILIES[arch] in why
    else:
        assert stack is not None and stack.every_step, why
    planned.model.native_decode = stack
    return planned, reference


# gpt-oss's fixture (gate_up scaled so its GLU clamps, routers spread) turns the q8 activations' rounding into
# different top-k picks: the default path is ~0.2 (relative) from float32 in the Python layers as in the stack,
# so the stack is held to the Python layers running the same planned linears instead.
SAME_PLAN = {"gpt-oss"}


def _planned_python(arch):
    path = fixture(arch).gguf("q8_0")
    model = load_model(path, max_model_len=64).model
    plan_model(model, path, formats=[GGUFNative(), get("float32-native")], use_cache=False, batch_invariant=True)
    return model


@pytest.mark.parametrize("arch", NATIVE_FAMILIES)
def test_stack_matches_float32_layers(arch):
    planned, reference = _models(arch)
    tolerance = 2.5 * GGUFNative.tolerance
    if arch in SAME_PLAN:
        reference, tolerance = _planned_python(arch), 1e-4
    prompts = [_prompt(3 + s, s) for s in range(3)]
    runs = [PagedRunner(m, num_seqs=3, max_len=32, block_size=4) for m in (planned, reference)]
    for i in range(4):
        feed = prompts if i == 0 else [[4 + (s + i) % 50] for s in range(3)]
        starts = [0] * 3 if i == 0 else [len(p) + i - 1 for p in prompts]
        ours, truth = (run.step([0, 1, 2], feed, starts) for run in runs)
        err = ((ours - truth).abs().max() / truth.abs().max()).item()
        assert err < tolerance, f"{arch} step {i}: relative error {err:.2e}"


@pytest.mark.parametrize("arch", [*NATIVE_FAMILIES, *PYTHON_FAMILIES])
def test_default_path_is_chunk_and_batch_invariant(arch):
    planned, _ = _models(arch)
    prompt = _prompt(21, 7)
    alone = PagedRunner(planned, num_seqs=1, max_len=64, block_size=4)
    whole = alone.step([0], [prompt], [0])[0]
    for schedule in ([21], [3] * 7, [1, 8, 12], [20, 1]):
        assert torch.equal(_prompt_logits(planned, prompt, schedule)[0], whole), f"{arch}: chunks {schedule}"
    reference = _prompt_logits(planned, prompt, [21])
    assert all(torch.equal(a, b) for a, b in zip(_prompt_logits(planned, prompt, [5, 16]), reference))
