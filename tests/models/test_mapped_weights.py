"""Weights kept only as they run: the mapped load gives the eager load's values, and holds no float32 copy."""
from __future__ import annotations

import gc
import re
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.models.loader import default_model_path, load_model
from haltwise.sampling_params import SamplingParams
from haltwise.models.mapped_weights import QuantizedEmbedding

VOCAB = 49152   # SmolLM2


@pytest.fixture(scope="module")
def eager():
    return load_model(None).model


@pytest.fixture(scope="module")
def mapped():
    return load_model(None, mapped=True).model


@settings(max_examples=30, deadline=None)
@given(ids=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=40))
def test_embedding_rows_equal_the_eager_table(eager, mapped, ids):
    assert isinstance(mapped.model.embed_tokens, QuantizedEmbedding)
    t = torch.tensor(ids)
    assert torch.equal(mapped.model.embed_tokens(t), eager.model.embed_tokens(t))


def test_every_linear_weight_equals_the_eager_one(eager, mapped):
    linears = {n: m for n, m in eager.named_modules() if isinstance(m, nn.Linear)}
    assert len(linears) == 30 * 4 + 1
    for name, module in linears.items():
        assert dict(mapped.named_modules())[name].weight.is_meta, name        # never materialized
        assert torch.equal(mapped.load_linear_weight(name), module.weight), name


@settings(max_examples=20, deadline=None)
@given(picks=st.lists(st.integers(0, 2**20), min_size=1, max_size=40), which=st.integers(0, 30 * 4))
def test_some_rows_of_a_linear_equal_those_of_the_eager_weight(eager, mapped, picks, which):
    """Verification dequantizes only sampled output rows (kernels/verify.py): the same values, fused shards
    and SmolLM2's llama-permuted q/k rows included."""
    name, module = [(n, m) for n, m in eager.named_modules() if isinstance(m, nn.Linear)][which]
    ids = torch.tensor(sorted({p % module.weight.shape[0] for p in picks}))
    assert torch.equal(mapped.load_linear_weight.rows(name, ids), module.weight[ids]), name


def test_the_rest_is_loaded_like_the_eager_model(eager, mapped):
    ours = {n: p for n, p in mapped.named_parameters() if not p.is_meta}
    theirs = dict(eager.named_parameters())
    assert ours and all(torch.equal(p, theirs[n]) for n, p in ours.items())
    assert sum(p.numel() for p in ours.values()) < 100_000                # norms only: 35k floats


def _float32_bytes_alive() -> int:
    gc.unfreeze()               # build_engine freezes what it built: frozen objects are not listed
    gc.collect()
    seen, total = set(), 0
    with warnings.catch_warnings():           # isinstance on torch.distributed's deprecated objects warns
        warnings.simplefilter("ignore")
        objects = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    for obj in objects:
        if obj.dtype == torch.float32 and not obj.is_meta:
            storage = obj.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


@pytest.mark.slow
def test_a_default_engine_keeps_no_float32_copy_of_the_weights():
    """The served default (dtype auto): linears run on the file's blocks and the embedding reads its rows, so
    the float32 bytes alive are the rope tables and norms -- not the 540 MB of a dequantized SmolLM2
    (the embedding alone is 113 MB)."""
    before = _float32_bytes_alive()
    engine = build_engine(None, EngineConfig(dtype="auto", kv_cache_memory=64 * 2**20, max_model_len=2048))
    held = _float32_bytes_alive() - before
    assert held < 16 * 2**20, f"{held / 2**20:.0f} MiB of float32 tensors alive"
    # The plan's copies of the blocks are what runs: the file's own pages are handed back (the 94 MiB the
    # plan read would otherwise stay counted twice); what a few embedding lookups fault back in is small.
    engine.add_request("r", engine.tokenizer.encode("Hello there"), SamplingParams(max_tokens=4, temperature=0))
    while engine.has_unfinished():
        engine.step()
    resident = _resident_bytes_of(default_model_path().resolve())
    assert resident < 8 * 2**20, f"{resident / 2**20:.0f} MiB of the mapped file resident"
    assert engine.kernel_plan is not None    # (the engine is alive while the bytes are counted)


def _resident_bytes_of(path) -> int:
    """Rss of this process's mappings of `path` (/proc/self/smaps)."""
    total, ours = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            ours = line.endswith(str(path))
        elif ours and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total
