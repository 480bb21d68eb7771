"""What a cached block's bits depend on, digested into the namespace every prompt-cache key carries.

    namespace = sha256(FORMAT_VERSION, model digest, KV dtype, block size, layer shape, RoPE settings,
                       kernel plan digest, batch invariance, native layer stack)

Model digest (model_digest): a catalog model carries a `.verified` stamp (models/catalog.py) recording its
path, size, mtime and the sha256 checked against the catalog; when the stamp matches the file's identity that
sha256 is used. Any other file: its size and mtime (ns) plus a sha256 of its first and last MiB (a GGUF's
header, metadata and tensor table, and the end of its last tensor). Safe because rewriting a model file
changes its mtime (and in practice its header or size), and the digest never needs the whole file read at
start; a file copied elsewhere keeps its header but gets a new mtime, so it only misses, never hits wrong.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from haltwise.models.rope import longrope_long

FORMAT_VERSION = 1   # bump when the block byte layout (block_bytes.py) or the entry file (entry_file.py) changes
_EDGE = 1 << 20


def model_digest(path: Path | None, tiny_config: Any = None) -> str:
    """The model's identity for the namespace (module docstring); the tiny test model is its config."""
    if path is None:
        return "tiny:" + hashlib.sha256(repr(tiny_config).encode()).hexdigest()
    path = Path(path).resolve()
    if path.is_dir():
        return "dir:" + ";".join(model_digest(p) for p in sorted(path.iterdir()) if p.is_file())
    st = path.stat()
    stamp = path.with_name(path.name + ".verified")
    try:
        recorded = json.loads(stamp.read_text())
        if (recorded.get("path"), recorded.get("size"), recorded.get("mtime_ns")) == (str(path), st.st_size,
                                                                                      st.st_mtime_ns):
            return "sha256:" + str(recorded["sha256"])
    except (OSError, ValueError, KeyError, AttributeError):
        pass
    h = hashlib.sha256(f"{st.st_size}|{st.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        h.update(f.read(_EDGE))
        f.seek(max(0, st.st_size - _EDGE))
        h.update(f.read(_EDGE))
    return "file:" + h.hexdigest()


def plan_digest(plan: Any, native_every_step: bool) -> str:
    """The kernel plan's cache key (host, torch, threads, model, native build) and its chosen formats."""
    if plan is None:
        return f"no-plan|native={native_every_step}"
    chosen = json.dumps(plan.chosen(), sort_keys=True)
    return f"{plan.cache_key}|{plan.batch_invariant}|{chosen}|native={native_every_step}"


def namespace(model: str, model_config: Any, kv_dtype: str, block_size: int, dtype: str, plan: str,
              max_model_len: int | None = None) -> bytes:
    """32-byte digest of everything that changes a block's bits (module docstring). max_model_len matters
    only to LongRoPE (phi3), whose factor set it fixes (models/rope.py)."""
    c = model_config
    rope = (c.rope_theta, c.rope_scaling, c.rope_local_theta, c.rope_freq_factors)
    if (c.rope_scaling or {}).get("rope_type") == "longrope":
        rope += ("long" if longrope_long(c.rope_scaling, c.max_position_embeddings, max_model_len) else "short",)
    shape = (c.architecture, c.num_layers, c.num_kv_heads, c.head_dim, c.sliding_window, c.layer_types)
    text = json.dumps([FORMAT_VERSION, model, kv_dtype, block_size, dtype, repr(shape), repr(rope), plan])
    return hashlib.sha256(text.encode()).digest()
