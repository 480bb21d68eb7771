"""The native LinearFormat: prepared from real SmolLM2 blocks, held to its tolerance by the plan's own
check, excluded with a reason when there are no blocks or the extension cannot build."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as Q
from haltwise.gguf.file import GGUFFile

from haltwise.kernels.formats import GGUFShard, LinearSource, Unsupported, all_formats
from haltwise.kernels.gguf_blocks import block_rows, linear_shards
from haltwise.kernels.host import probe
from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import GGUFNative, prepare_blocks
from haltwise.kernels.plan import check
from haltwise.models.loader import default_model_path, load_model
from tests.kernels.native.blocks import random_blocks

FORMAT = GGUFNative()
needs_native = pytest.mark.skipif(build.load() is None, reason=f"native kernels unavailable: {build.failure()}")


@pytest.fixture(scope="module")
def smollm2_sources() -> dict[str, LinearSource]:
    loaded = load_model(default_model_path(), dtype="float32", rope_scaling=None, max_model_len=256)
    shards = linear_shards(GGUFFile(default_model_path()), loaded.config)
    modules = dict(loaded.model.named_modules())
    names = ["model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.o_proj",
             "model.layers.0.mlp.gate_up_proj", "model.layers.0.mlp.down_proj", "lm_head"]
    return {n: LinearSource(n, modules[n].weight.detach(), None, shards[n]) for n in names}


def test_registered() -> None:
    assert FORMAT.name in [f.name for f in all_formats()]


@needs_native
def test_real_weights_pass_the_plans_check(smollm2_sources) -> None:
    """Every SmolLM2 linear shape (Q4_1 layers, Q8_0 lm_head), interleaved and plain, agrees with
    float32 F.linear within the format's tolerance at the plan's check row counts."""
    assert FORMAT.unavailable(probe()) is None
    for source in smollm2_sources.values():
        for interleave in (True, False):
            assert check(FORMAT, prepare_blocks(source, interleave), source) is None, source.name


@needs_native
def test_decode_row_error_is_small(smollm2_sources) -> None:
    """The stated error of q8 activations on real weights and activation-like inputs: well under 1%."""
    source = smollm2_sources["model.layers.0.mlp.gate_up_proj"]
    x = torch.randn(1, 576, generator=torch.Generator().manual_seed(5))
    ref = F.linear(x, source.weight)
    err = ((FORMAT.run(FORMAT.prepare(source), x) - ref).abs().max() / ref.abs().max()).item()
    assert err < 0.01


def test_no_blocks_is_unsupported() -> None:
    with pytest.raises(Unsupported, match="no raw GGUF blocks"):
        FORMAT.prepare(LinearSource("x", torch.zeros(8, 64)))


def test_unsupported_qtype_and_row_mismatch() -> None:
    rng = np.random.default_rng(0)
    data, _ = random_blocks(Q.Q4_1, 8, 64, rng)
    with pytest.raises(Unsupported, match="Q2_K"):
        FORMAT.prepare(LinearSource("x", torch.zeros(8, 64), gguf=[GGUFShard(Q.Q2_K, data, 8)]))
    with pytest.raises(Unsupported, match="8 rows, the weight has 9"):
        FORMAT.prepare(LinearSource("x", torch.zeros(9, 64), gguf=[GGUFShard(Q.Q4_1, data, 8)]))


def test_failed_build_excludes_the_format_with_its_reason(tmp_path, monkeypatch) -> None:
    """A compile error makes load() return None (never raise) and unavailable() say why."""
    broken = tmp_path / "csrc"
    broken.mkdir()
    for name in build.SOURCES:
        (broken / name).write_text("#error deliberately broken for the test\n")
    monkeypatch.setattr(build, "CSRC", broken)
    monkeypatch.setattr(build, "_state", {})
    monkeypatch.setenv("HALTWISE_KERNEL_CACHE", str(tmp_path / "cache"))
    assert build.load() is None
    reason = FORMAT.unavailable(probe())
    assert reason is not None and "failed to build" in reason


@pytest.fixture(scope="module")
def qwen_k_quant_sources() -> dict[Q, LinearSource]:
    """Real Qwen2.5-Coder-0.5B Q4_K_M down projections (896 x 4864): the first Q4_K and the first Q6_K layer."""
    from gguf import quants

    from tests.models.real_models import real_model_path

    found: dict[Q, LinearSource] = {}
    for t in GGUFFile(real_model_path("qwen2.5-coder-0.5b")).tensors:
        qtype = Q(t.tensor_type)
        if t.name.endswith("ffn_down.weight") and qtype in (Q.Q4_K, Q.Q6_K) and qtype not in found:
            rows, cols = int(t.shape[1]), int(t.shape[0])
            data = np.array(block_rows(t, rows))
            weight = torch.from_numpy(quants.dequantize(data, qtype).reshape(rows, cols).astype(np.float32))
            found[qtype] = LinearSource(t.name, weight, None, [GGUFShard(qtype, data, rows)])
    return found


@needs_native
def test_real_k_quants_run_interleaved_within_their_bound(qwen_k_quant_sources) -> None:
    """Qwen's Q4_K and Q6_K weights are prepared as X8 records (repack.py), pass the plan's check, keep
    every output within the format's error bound at 1 and 32 rows (activations with an outlier channel),
    and agree with the plain per-row kernels to float rounding, on every ISA path this CPU runs."""
    from haltwise.kernels.native.repack import X8

    native = build.load()
    for qtype, source in qwen_k_quant_sources.items():
        prepared = FORMAT.prepare(source)
        assert prepared.qtypes == [X8[qtype]], source.name
        assert check(FORMAT, prepared, source) is None, source.name
        plain = prepare_blocks(source, interleave=False)
        for rows in (1, 32):
            x = torch.randn(rows, source.shape[1], generator=torch.Generator().manual_seed(rows))
            x[:, 11] *= 30.0
            ref = F.linear(x, source.weight)
            bound = FORMAT.error_bound(x, source.weight, x.abs() @ source.weight.abs().T)
            for isa in native.isas():
                y = native.gemm(prepared.weights, prepared.qtypes, prepared.rows, x, isa)
                assert bool(((y - ref).abs() <= bound).all()), f"{source.name} {isa} {rows} rows"
                y_plain = native.gemm(plain.weights, plain.qtypes, plain.rows, x, isa)
                assert ((y - y_plain).abs().max() / y_plain.abs().max()).item() < 1e-5, f"{source.name} {isa}"
