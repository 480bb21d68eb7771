"""The regrouped-record cache (kernels/record_cache.py): what a first start regroups, a second start maps.

Entries come back byte for byte and only for the linear they were made from; a changed GGUF, a file
others can write, a truncated or foreign file is never used; a model planned twice regroups nothing the
second time and computes the same bits.
"""
import os
import threading

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from haltwise.kernels import record_cache
from haltwise.kernels.model_plan import plan_model
from haltwise.kernels.native import build, gguf_format
from haltwise.kernels.native.gguf_format import GGUFNative
from haltwise.kernels.native.repack import repack_x8 as real_repack
from haltwise.kernels.record_cache import RecordCache
from haltwise.models.loader import load_model
from tests.models.families import hf_model, write_gguf


@pytest.fixture
def any_size(monkeypatch):
    monkeypatch.setattr(record_cache, "MIN_CACHED_BYTES", 0)


def gguf_file(tmp_path, name="m.gguf"):
    path = tmp_path / name
    path.write_bytes(b"GGUF stand-in")
    return path


def saved(cache: RecordCache) -> None:
    thread = cache.save()
    assert thread is not None
    thread.join()


def records(rows, width, seed):
    return np.random.default_rng(seed).integers(0, 256, (rows, width), dtype=np.uint8)


def test_records_read_are_the_process_own_memory_not_the_file(tmp_path, any_size):
    """A later start copies the file (record_cache._anonymous_copy): the file rewritten or truncated under
    a running server changes none of its records and cannot fault a read (a map of the file would show
    the new bytes, and a truncated one would raise SIGBUS)."""
    gguf = gguf_file(tmp_path)
    first = RecordCache.for_model(gguf)
    a = records(64, 4096, 3)
    first.put("layers.0.qkv#0", "Q8_0:8x34", a, 1008)
    saved(first)
    second = RecordCache.for_model(gguf)
    got, _ = second.get("layers.0.qkv#0", "Q8_0:8x34")
    size = second.path.stat().st_size
    with open(second.path, "r+b") as f:
        f.write(b"\0" * size)
    assert np.array_equal(got, a)
    os.truncate(second.path, 0)
    assert np.array_equal(got, a)


def test_entries_come_back_byte_for_byte_for_the_same_source_only(tmp_path, any_size):
    gguf = gguf_file(tmp_path)
    first = RecordCache.for_model(gguf)
    a, b = records(37, 1160, 1), records(5, 4100, 2)        # neither a page multiple
    first.put("layers.0.qkv#0", "Q8_0:8x34", a, 1008)
    first.put("lm_head#0", "Q6_K:3x210", b, 1014)
    saved(first)
    second = RecordCache.for_model(gguf)
    got, code = second.get("layers.0.qkv#0", "Q8_0:8x34")
    assert code == 1008 and np.array_equal(got, a)
    got, code = second.get("lm_head#0", "Q6_K:3x210")
    assert code == 1014 and np.array_equal(got, b)
    assert second.get("lm_head#0", "Q6_K:4x210") is None          # made from other shards
    assert second.get("layers.1.qkv#0", "Q8_0:8x34") is None
    assert second.hits == 2
    assert second.save() is None                                    # nothing new: nothing rewritten


def test_small_models_are_not_written(tmp_path):
    cache = RecordCache.for_model(gguf_file(tmp_path))
    cache.put("lm_head#0", "Q8_0:8x34", records(8, 272, 0), 1008)
    assert cache.save() is None and not cache.path.exists()


def test_a_changed_gguf_misses(tmp_path, any_size):
    gguf = gguf_file(tmp_path)
    cache = RecordCache.for_model(gguf)
    cache.put("lm_head#0", "Q8_0:8x34", records(8, 272, 0), 1008)
    saved(cache)
    os.utime(gguf, ns=(1, 1))
    changed = RecordCache.for_model(gguf)
    assert changed.path != cache.path and changed.get("lm_head#0", "Q8_0:8x34") is None
    changed.put("lm_head#0", "Q8_0:8x34", records(8, 272, 0), 1008)
    saved(changed)
    assert not cache.path.exists()                                  # the file's older records are removed


@pytest.mark.parametrize("fault", ["writable by others", "truncated", "not a record file"])
def test_a_file_not_to_be_trusted_is_not_used(tmp_path, any_size, fault, caplog):
    gguf = gguf_file(tmp_path)
    cache = RecordCache.for_model(gguf)
    cache.put("lm_head#0", "Q8_0:8x34", records(8, 4096, 0), 1008)
    saved(cache)
    if fault == "writable by others":
        cache.path.chmod(0o666)
    elif fault == "truncated":
        os.truncate(cache.path, cache.path.stat().st_size - 1)
    else:
        cache.path.write_bytes(b"\0" * 8192)
    assert RecordCache.for_model(gguf).get("lm_head#0", "Q8_0:8x34") is None
    assert "regrouped weight records" in caplog.text


def test_a_dead_writers_temp_file_is_removed(tmp_path, any_size):
    gguf = gguf_file(tmp_path)
    cache = RecordCache.for_model(gguf)
    dead = cache.path.with_name(f".{cache.path.name}.{2**22 + 7}.tmp")    # above any pid_max
    dead.parent.mkdir(parents=True)
    dead.write_bytes(b"half a file")
    cache.put("lm_head#0", "Q8_0:8x34", records(8, 272, 0), 1008)
    saved(cache)
    assert cache.path.exists() and not dead.exists()


def test_off_reads_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_RECORD_CACHE", "0")
    cache = RecordCache.for_model(gguf_file(tmp_path))
    cache.put("lm_head#0", "Q8_0:8x34", records(8, 272, 0), 1008)
    assert cache.path is None and cache.save() is None


@pytest.mark.skipif(build.load() is None, reason=f"native kernels unavailable: {build.failure()}")
@pytest.mark.parametrize("quant", [Q.Q8_0, Q.Q4_0])
def test_a_model_planned_again_maps_its_records_and_computes_the_same_bits(tmp_path, monkeypatch, any_size, quant):
    family = "qwen2" if quant == Q.Q8_0 else "llama"
    path = write_gguf(hf_model(family, seed=3, hidden_size=256, intermediate_size=512, head_dim=64),
                      family, tmp_path / "m.gguf", quant=quant)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(0))

    def planned_outputs():
        model = load_model(path).model
        plan_model(model, path, formats=[GGUFNative()])
        layer = model.model.layers[0]
        return model, [linear(x) for linear in (layer.self_attn.qkv_proj, layer.mlp.gate_up_proj)]

    made = []
    monkeypatch.setattr(gguf_format, "repack_x8", lambda *a: made.append(a) or real_repack(*a))
    _, first = planned_outputs()
    for thread in threading.enumerate():
        if thread.name == "haltwise-record-cache":
            thread.join()
    assert made, "the first plan regroups"
    made.clear()
    _, second = planned_outputs()
    assert not made, "the second plan regrouped instead of mapping the records"
    for a, b in zip(first, second):
        assert torch.equal(a, b)
