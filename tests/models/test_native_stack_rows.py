"""The native layer stack against float32 math, row count by row count, and its batch invariance.

1. At 1, 2, 3, 8 and 32 decode rows, for float32 weights and every GGUF block type gguf-py can write
   (Q4_0, Q4_1, Q5_0, Q8_0; the k-quants are covered at kernel level in tests/kernels/native and end to
   end by the real Qwen model), the stack's logits stay within the model-level tolerance of the Python
   layers run in plain float32 (nn.Linear on the dequantized weights, torch attention).
2. Run on every step (the batch-invariant default), a sequence's logits are the same bits whether its
   prompt is prefilled whole, in chunks, beside another sequence's prefill or decodes, or computed after
   its prefix was cached -- every family, float32 and Q8_0.
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
from tests.models.families import FAMILIES, VOCAB, hf_model, write_gguf
from tests.models.paged_runner import PagedRunner

QUANTS = [None, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q8_0]
# max |logit difference| / max |logit|: the Python layers here are the float32 truth on the checkpoint's
# values; the stack quantizes activations to q8 (each linear within its error_bound, about 1% of max|y|
# at most), carried through the layers: 2.5x the format's relative tolerance, as test_native_decode.
TOLERANCE = {None: 1e-4, **{q: 2.5 * GGUFNative.tolerance for q in QUANTS[1:]}}
# The same, with the KV cache stored as bfloat16 / int8 in both paths: one rounding step of a stored value
# (2^-8 relative for bfloat16, max|row| / 127 for int8) where the paths' float32 K/V straddle a boundary.
KV_TOLERANCE = {"bfloat16": 1e-2, "int8": 2e-2}


@pytest.fixture(autouse=True)
def no_caches(monkeypatch):
    monkeypatch.setenv("HALTWISE_WEIGHT_CACHE", "0")
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    assert build.load() is not None, build.failure()


def _models(tmp_path, family, quant):
    """(planned model with the stack, the same weights unplanned: plain float32 Python layers)."""
    theirs = hf_model(family, seed=3, **({"query_pre_attn_scalar": 16} if family == "gemma3" else {}))
    path = write_gguf(theirs, family, tmp_path / f"{family}.gguf", quant=quant)
    planned, reference = load_model(path).model, load_model(path).model
    fmt = GGUFNative() if quant else get("float32-native")
    plan_model(planned, path, formats=[fmt, get("float32-native")], use_cache=False, batch_invariant=True)
    stack, why = NativeDecode.build(planned.model, every_step=True, head=planned.lm_head)
    assert stack is not None and stack.every_step, why
    planned.model.native_decode = stack
    return planned, reference


def _prompt(n, seed):
    return torch.randint(4, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("rows", [1, 2, 3, 8, 32])
@pytest.mark.parametrize("quant", QUANTS, ids=lambda q: q.name if q else "float32")
def test_stack_rows_match_float32_layers(tmp_path, quant, rows):
    planned, reference = _models(tmp_path, "qwen3" if rows % 2 else "gemma3", quant)
    prompts = [_prompt(3 + s % 5, s) for s in range(rows)]
    runs = [PagedRunner(m, num_seqs=rows, max_len=16, block_size=4) for m in (planned, reference)]
    for run in runs:
        for s, prompt in enumerate(prompts):
            run.step([s], [prompt], [0])
    for i in range(3):                                     # decode steps of `rows` rows
        feed = [[4 + (s + i) % 50] for s in range(rows)]
        starts = [len(p) + i for p in prompts]
        ours, truth = (run.step(list(range(rows)), feed, starts) for run in runs)
        err = ((ours - truth).abs().max() / truth.abs().max()).item()
        assert err < TOLERANCE[quant], f"step {i}: relative error {err:.2e}"


def _prompt_logits(model, prompt, schedule, kv_dtype=None):
    """Logits of the prompt's last position and of 4 greedy decodes, prefilled in chunks of `schedule`
    sizes; every step also carries a neighbour sequence (its own prefill chunk, then decodes)."""
    runner = PagedRunner(model, num_seqs=2, max_len=64, block_size=4, kv_dtype=kv_dtype)
    neighbour, pos, n_pos, out = _prompt(9, 99), 0, 0, []
    for size in schedule:
        chunk = prompt[pos:pos + size]
        n_chunk = neighbour[n_pos:n_pos + 3] if n_pos < len(neighbour) else [5]
        logits = runner.step([0, 1], [chunk, n_chunk], [pos, n_pos])
        pos, n_pos = pos + len(chunk), n_pos + len(n_chunk)
    out.append(logits[0])
    token = int(logits[0].argmax())
    for _ in range(4):
        logits = runner.step([0], [[token]], [pos])
        pos += 1
        out.append(logits[0])
        token = int(logits[0].argmax())
    return out


@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize("quant", [None, Q.Q8_0], ids=["float32", "q8_0"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_step_stack_is_chunk_and_batch_invariant(tmp_path, family, quant, kv_dtype):
    planned, _ = _models(tmp_path, family, quant)
    prompt = _prompt(21, 7)
    alone = PagedRunner(planned, num_seqs=1, max_len=64, block_size=4, kv_dtype=kv_dtype)
    whole = [alone.step([0], [prompt], [0])[0]]
    for schedule in ([21], [3] * 7, [1, 8, 12], [20, 1]):
        got = _prompt_logits(planned, prompt, schedule, kv_dtype)
        assert torch.equal(got[0], whole[0]), f"{family}: prompt logits differ with chunks {schedule}"
    reference = _prompt_logits(planned, prompt, [21], kv_dtype)
    assert all(torch.equal(a, b) for a, b in zip(_prompt_logits(planned, prompt, [5, 16], kv_dtype), reference))


@pytest.mark.parametrize("kv_dtype", ["bfloat16", "int8"])
@pytest.mark.parametrize("family", FAMILIES)
def test_stack_reads_a_quantized_cache_like_the_python_layers(tmp_path, family, kv_dtype):
    """Both paths store and read the same formats (kv_codec / the native store_kv, attend): the stack with
    float32 weights stays close to the Python layers on the same KV dtype. Not bit-equal: the two paths'
    K/V differ in the last float32 bits, which can move a stored value by one rounding step."""
    planned, reference = _models(tmp_path, family, None)
    prompts = [_prompt(5 + s, s) for s in range(3)]
    runs = [PagedRunner(m, num_seqs=3, max_len=32, block_size=4, kv_dtype=kv_dtype) for m in (planned, reference)]
    outs = [run.step([0, 1, 2], prompts, [0, 0, 0]) for run in runs]
    for i in range(3):
        feed = [[4 + (s + i) % 50] for s in range(3)]
        outs = [run.step([0, 1, 2], feed, [len(p) + i for p in prompts]) for run in runs]
        err = ((outs[0] - outs[1]).abs().max() / outs[1].abs().max()).item()
        assert err < KV_TOLERANCE[kv_dtype], f"step {i}: relative error {err:.2e}"
