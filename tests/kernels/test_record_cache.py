"""The regrouped-record cache (kernels/record_cache.py): what a first start regroups, a second start maps.

Entries come back byte for byte and only for the linear they were made from; a changed GGUF, a file
others can write, a truncated or foreign file is never used; a model planned twice regroups nothing the
second time and computes the same bits.
"""
import os
import signal
import subprocess
import sys
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


def backing_inode(array: np.ndarray) -> int:
    """The inode of the file mapped where `array`'s bytes lie (0: anonymous memory), from /proc/self/maps."""
    address = array.__array_interface__["data"][0]
    for line in open("/proc/self/maps"):
        fields = line.split()
        start, end = (int(a, 16) for a in fields[0].split("-"))
        if start <= address < end:
            return int(fields[4])
    raise AssertionError("the address is in no mapping")


def expert(name: str) -> bool:
    return ".experts." in name


def make(cache: RecordCache, name: str, data: np.ndarray) -> np.ndarray:
    """A mapped entry of `data`'s bytes, written into the file as the plan writes regrouped records."""
    return cache.make(name, "Q8_0:x", data.shape, 1008, lambda out: out.__setitem__(slice(None), data))


def test_mapped_entries_are_the_file_on_every_start_the_rest_memory(tmp_path, any_size):
    """A mapped entry is used from the record file as soon as it is made (first start) and on later starts;
    the others are the process's own memory; both come back byte for byte."""
    gguf = gguf_file(tmp_path)
    first = RecordCache.for_model(gguf, mapped=expert)
    made = {"mlp.experts.3.down_proj#0": records(16, 4100, 1), "lm_head#0": records(8, 272, 2)}
    used = {"mlp.experts.3.down_proj#0": make(first, "mlp.experts.3.down_proj#0", made["mlp.experts.3.down_proj#0"])}
    first.put("lm_head#0", "Q8_0:x", made["lm_head#0"], 1008)
    used["lm_head#0"] = first.get("lm_head#0", "Q8_0:x")[0]
    saved(first)
    inode = first.path.stat().st_ino
    assert backing_inode(used["mlp.experts.3.down_proj#0"]) == inode
    assert backing_inode(used["lm_head#0"]) == 0
    second = RecordCache.for_model(gguf, mapped=expert)
    for name, data in made.items():
        got, code = second.get(name, "Q8_0:x")
        assert code == 1008 and np.array_equal(got, data)
        assert backing_inode(got) == (inode if expert(name) else 0), name


def test_mapped_entries_with_the_cache_off_live_in_an_unnamed_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_RECORD_CACHE", "0")
    cache = RecordCache.for_model(gguf_file(tmp_path), mapped=expert)
    data = records(16, 4100, 1)
    view = make(cache, "mlp.experts.0.gate_up_proj#0", data)
    assert np.array_equal(view, data) and backing_inode(view) != 0
    assert cache.save() is None
    folder = tmp_path / "cache" / "records"
    assert not folder.exists() or not any(folder.iterdir())


def test_a_start_killed_while_writing_mapped_entries_leaves_nothing_used(tmp_path, any_size):
    """kill -9 while a first start writes its experts' records: the next start finds no file (the temp file is
    the dead writer's, removed when a file is next finished) and regroups; a file cut short is never used."""
    gguf = gguf_file(tmp_path)
    script = ("import os, signal, numpy as np\n"
              "from pathlib import Path\n"
              "from haltwise.kernels.record_cache import RecordCache\n"
              f"c = RecordCache.for_model(Path({str(gguf)!r}), mapped=lambda n: True)\n"
              "for e in range(4):\n"
              "    c.make(f'mlp.experts.{e}.down_proj#0', 'Q8_0:x', (64, 4096), 1008, lambda out: out.fill(e))\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", script], env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)},
                          check=False, capture_output=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    cache = RecordCache.for_model(gguf, mapped=expert)
    left = list(cache.path.parent.glob(".*.tmp"))
    assert len(left) == 1 and cache.get("mlp.experts.0.down_proj#0", "Q8_0:x") is None
    cache.put("mlp.experts.0.down_proj#0", "Q8_0:x", records(8, 272, 0), 1008)
    saved(cache)
    assert cache.path.exists() and not left[0].exists()


def test_a_full_disk_while_mapping_experts_is_a_clear_error(tmp_path):
    """Records that cannot be written (here: a file-size limit, as a full disk) fail the start with the way out,
    never a crash or a silent copy into memory."""
    script = ("import resource, signal, numpy as np\n"
              "from pathlib import Path\n"
              "from haltwise.errors import ModelLoadError\n"
              "from haltwise.kernels.record_cache import RecordCache\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
              f"c = RecordCache.for_model(Path({str(gguf_file(tmp_path))!r}), mapped=lambda n: True)\n"
              "try:\n"
              "    c.make('mlp.experts.0.down_proj#0', 'Q8_0:x', (512, 4096), 1008, lambda out: out.fill(1))\n"
              "except ModelLoadError as e:\n"
              "    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-c", script], env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)},
                          check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "--expert-weights resident" in done.stdout
