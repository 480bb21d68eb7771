"""Every setting that changes a block's bits changes the namespace (a mismatch is a miss, never a wrong hit)."""
from __future__ import annotations

import os
from dataclasses import replace

from haltwise.config import ModelConfig
from haltwise.engine.prompt_cache import identity

CONFIG = ModelConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=16, max_position_embeddings=512)
BASE = ("file:abc", CONFIG, "int8", 16, "auto", "plan-a")


def test_each_input_changes_the_namespace():
    base = identity.namespace(*BASE)
    assert identity.namespace(*BASE) == base
    variants = [("file:abd", *BASE[1:]), (BASE[0], replace(CONFIG, rope_theta=5e5), *BASE[2:]),
                (BASE[0], replace(CONFIG, rope_scaling={"rope_type": "linear", "factor": 2.0}), *BASE[2:]),
                (BASE[0], replace(CONFIG, num_layers=3), *BASE[2:]),
                (*BASE[:2], "float32", *BASE[3:]), (*BASE[:3], 32, *BASE[4:]), (*BASE[:4], "float32", BASE[5]),
                (*BASE[:5], "plan-b")]
    assert len({identity.namespace(*v) for v in variants} | {base}) == len(variants) + 1


def test_longrope_factor_set_changes_the_namespace():
    """phi3's LongRoPE rotates with its short or long factors by max_model_len: entries written under one set
    never restore under the other; other rope types ignore max_model_len."""
    longrope = replace(CONFIG, max_position_embeddings=512, rope_scaling={
        "rope_type": "longrope", "original_max_position_embeddings": 128, "short_factor": [1.0] * 8,
        "long_factor": [2.0] * 8})
    short, short_too, long = (identity.namespace(BASE[0], longrope, *BASE[2:], n) for n in (64, 128, 512))
    assert short == short_too and short != long
    assert identity.namespace(*BASE, 64) == identity.namespace(*BASE, 512) == identity.namespace(*BASE)


def test_model_digest_follows_the_file(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(3 << 20))
    first = identity.model_digest(f)
    assert identity.model_digest(f) == first and first.startswith("file:")
    data = bytearray(f.read_bytes())
    data[10] = 1                                   # same size, new header byte, mtime kept
    st = f.stat()
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert identity.model_digest(f) != first
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert identity.model_digest(f) not in (first,)


def test_a_catalog_stamp_gives_its_sha256_only_while_it_matches(tmp_path):
    import json

    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(100))
    st = f.stat()
    stamp = tmp_path / "m.gguf.verified"
    stamp.write_text(json.dumps({"path": str(f.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                 "sha256": "00ff"}))
    assert identity.model_digest(f) == "sha256:00ff"
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10))
    assert identity.model_digest(f).startswith("file:")


def test_plan_digest_names_formats_and_native_stack():
    assert identity.plan_digest(None, False) != identity.plan_digest(None, True)
