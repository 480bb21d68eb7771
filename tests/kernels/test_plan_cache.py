"""The plan cache: a second start reads the plan; any change that can alter a measurement re-measures."""
import dataclasses
import json
import os

import pytest

from haltwise.kernels import plan, plan_cache
from haltwise.kernels.formats import get, registry_version
from haltwise.kernels.host import probe
from haltwise.kernels.model_plan import plan_model
from haltwise.models.tiny import tiny_llama


@pytest.fixture(autouse=True)
def quiet_timings(monkeypatch):
    """These tests are about caching: a busy host's implausible timings (which keep a plan out of the
    cache, tested in test_plan.py) must not decide them."""
    monkeypatch.setattr(plan, "implausible_cells", lambda group, last: [])


def lacking_flag() -> str:
    """An ISA flag this host does not report: "another host" (never assume which flags this host has)."""
    return next(f for f in ("avx512f", "amx_tile", "avx2", "asimd", "sve2", "haltwise_test_isa") if f not in probe().flags)


def key_for(host, model, formats):
    return plan_cache.plan_key(host, plan_cache.model_identity(model), registry_version(formats))


def test_key_changes_with_cpu_flags_torch_threads_model_file_and_formats(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"weights")
    host, formats = probe(), [get("float32"), get("bf16")]
    base = key_for(host, model, formats)
    assert key_for(host, model, formats) == base
    changed_hosts = [dataclasses.replace(host, flags=host.flags | {lacking_flag()}),
                     dataclasses.replace(host, cpu_model="Intel Xeon Platinum 8480+"),
                     dataclasses.replace(host, torch_version="9.9.9"),
                     dataclasses.replace(host, threads=host.threads + 1)]
    assert base not in {key_for(h, model, formats) for h in changed_hosts}
    assert key_for(host, model, formats[:1]) != base
    os.utime(model, ns=(1, 1))                    # same bytes, new mtime: another file as far as we know
    assert key_for(host, model, formats) != base
    model.write_bytes(b"other weights")
    assert key_for(host, model, formats) != base


def test_second_plan_is_read_from_the_cache_and_a_changed_host_remeasures(tmp_path):
    formats = [get("float32")]
    first, _ = plan_model(tiny_llama(300), None, formats)
    assert not first.from_cache
    files = list(plan_cache.cache_dir().glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["cache_key"] == first.cache_key
    second, counts = plan_model(tiny_llama(300), None, formats)
    assert second.from_cache and second.chosen() == first.chosen() and counts
    other_host = dataclasses.replace(probe(), flags=probe().flags | {lacking_flag()})
    third, _ = plan_model(tiny_llama(300), None, formats, host=other_host)
    assert not third.from_cache and third.cache_key != first.cache_key


def test_a_corrupt_cached_plan_is_measured_again(tmp_path):
    formats = [get("float32")]
    first, _ = plan_model(tiny_llama(300), None, formats)
    (plan_cache.cache_dir() / f"{first.cache_key}.json").write_text("{not json")
    again, _ = plan_model(tiny_llama(300), None, formats)
    assert not again.from_cache


def test_cache_off(monkeypatch):
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    plan, _ = plan_model(tiny_llama(300), None, [get("float32")])
    assert plan_cache.cache_dir() is None and plan_cache.store(plan) is None
    assert not plan_model(tiny_llama(300), None, [get("float32")])[0].from_cache


def test_a_failed_or_changed_native_build_never_meets_a_cached_native_plan(monkeypatch):
    from haltwise.kernels.native import build

    formats = [get("float32-native"), get("float32")]
    first, _ = plan_model(tiny_llama(300), None, formats, batch_invariant=True)
    assert plan_model(tiny_llama(300), None, formats, batch_invariant=True)[0].from_cache
    monkeypatch.setattr(build, "build_key", lambda: "a-changed-kernel-source")
    changed, _ = plan_model(tiny_llama(300), None, formats, batch_invariant=True)
    assert not changed.from_cache and changed.cache_key != first.cache_key
    monkeypatch.setattr(build, "_state", {"failure": "native kernels failed to build (simulated)"})
    failed, counts = plan_model(tiny_llama(300), None, formats, batch_invariant=True)
    assert not failed.from_cache and failed.cache_key not in (first.cache_key, changed.cache_key)
    assert "float32-native" not in counts and set(counts) == {"float32"}
