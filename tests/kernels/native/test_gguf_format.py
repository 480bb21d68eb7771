"""The native LinearFormat: prepared from real SmolLM2 blocks, held to its tolerance by the plan's own
check, excluded with a reason when there are no blocks or the extension cannot build."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType as Q
from haltwise.models.gguf_file import GGUFFile

from haltwise.kernels.formats import GGUFShard, LinearSource, Unsupported, all_formats
from haltwise.kernels.gguf_blocks import linear_shards
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
