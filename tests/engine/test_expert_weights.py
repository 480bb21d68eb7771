"""Routed experts resident or mapped (engine/expert_weights.py): the policy, and on the converter's tiny MoE
models that mapped experts are the files' pages (the record file, or the GGUF for MXFP4 blocks) while every
other weight is the process's memory, with the same bits as resident experts on the default path."""
import numpy as np
import pytest
import torch

from haltwise.engine.expert_weights import cgroup_limits, expert_bytes, maps_experts, memory_limit
from haltwise.kernels.model_plan import plan_model
from haltwise.kernels.native import build
from haltwise.kernels.native.gguf_format import GGUFNative
from haltwise.models.loader import load_model
from haltwise.models.native_decode import NativeDecode
from tests.kernels.test_record_cache import backing_inode
from tests.models.converted import fixture
from tests.models.test_native_decode import decode_logits

pytestmark = pytest.mark.skipif(build.load() is None, reason=f"native kernels unavailable: {build.failure()}")


def test_auto_maps_a_file_larger_than_half_the_memory(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"\0" * 1000)
    assert maps_experts("auto", model, limit=1999) and not maps_experts("auto", model, limit=2000)
    assert maps_experts("mapped", model, limit=10**12) and not maps_experts("resident", model, limit=1)
    assert not maps_experts("mapped", tmp_path)                    # a Hugging Face folder has no blocks to map
    with pytest.raises(ValueError):
        maps_experts("swap", model)
    assert 0 < memory_limit() <= 2**50


def test_the_cgroup_limit_is_the_process_own_groups_or_an_ancestors(tmp_path):
    """A container's limit: cgroup v1 (memory.limit_in_bytes on the group or a parent) or v2 (memory.max, "max"
    for none), found from /proc/self/cgroup's paths; another group's limit is not this process's."""
    def write(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    v1, v2 = tmp_path / "memory", tmp_path / "unified"
    write(v1 / "memory.limit_in_bytes", "9223372036854771712")
    write(v1 / "pod" / "memory.limit_in_bytes", "8589934592")
    write(v1 / "pod" / "me" / "memory.limit_in_bytes", "9223372036854771712")
    write(v1 / "other" / "memory.limit_in_bytes", "1024")
    write(v2 / "memory.max", "max")
    write(v2 / "svc" / "memory.max", "4294967296")
    proc = tmp_path / "cgroup"
    write(proc, "4:memory:/pod/me\n3:cpu:/other\n0::/svc\n")
    limits = cgroup_limits(str(proc), (str(v2),), str(v1))
    assert min(limits) == 4294967296 and 8589934592 in limits and 1024 not in limits
    write(proc, "4:cpuset,memory:/\n")
    assert min(cgroup_limits(str(proc), (str(v2),), str(v1))) == 9223372036854771712
    assert cgroup_limits(str(tmp_path / "missing")) == []


def weights_of(linear) -> list[np.ndarray]:
    """The block or record arrays a linear's native format runs ([] when it runs float32)."""
    prepared = next((p for f, p in linear._by_bucket if f.name == GGUFNative.name), None)
    return [w.numpy() for w in prepared.weights] if prepared else []


def default_path(path, map_experts: bool):
    model = load_model(path).model
    plan_model(model, path, batch_invariant=True, map_experts=map_experts)
    stack, why = NativeDecode.build(model.model, every_step=True, head=model.lm_head)
    assert stack is not None and stack.every_step, why
    return model, decode_logits(model, stack)


@pytest.mark.parametrize("arch,outtype", [("qwen3moe", "q8_0"), ("gpt-oss", "mxfp4")])
def test_mapped_experts_are_file_pages_with_the_resident_bits(arch, outtype, tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_CACHE_DIR", str(tmp_path))
    path = fixture(arch).gguf(outtype)
    _, resident = default_path(path, map_experts=False)
    for start in ("first", "second"):                    # regrouped now / read from the record file
        model, mapped = default_path(path, map_experts=True)
        assert all(torch.equal(a, b) for a, b in zip(mapped, resident)), start
        # MXFP4 has no records: its blocks are the GGUF's own; Q8_0's records are the record file's
        records = [path] if outtype == "mxfp4" else list((tmp_path / "records").glob("*.x8"))
        assert len(records) == 1, start
        owner = records[0].stat().st_ino
        layer = model.model.layers[0]
        for e in (0, len(layer.mlp.experts) - 1):
            for linear in (layer.mlp.experts[e].gate_up_proj, layer.mlp.experts[e].down_proj):
                assert {backing_inode(w) for w in weights_of(linear)} == {owner}, (start, e)
        for linear in (layer.self_attn.qkv_proj, layer.self_attn.o_proj):   # gpt-oss's tiny ones: float32
            assert not any(backing_inode(w) for w in weights_of(linear)), start


def test_expert_bytes_count_the_routed_expert_tensors():
    path = fixture("qwen3moe").gguf("q8_0")
    from haltwise.gguf.reader import open_gguf

    tensors = open_gguf(path).tensors
    assert expert_bytes(path) == sum(t.n_bytes for t in tensors if "exps" in t.name) > 0
