"""A random-weight qwen3moe GGUF with Qwen3-30B-A3B's real per-layer shapes, for `haltwise bench moe`.

No real weights are needed to time a layer: only its shapes and its tensors' types. The file is made in two
steps, each by a real tool:

    1. f16 GGUF       written by the `gguf` package's GGUFWriter (as llama.cpp's convert_hf_to_gguf.py writes
                      a Qwen3MoeForCausalLM: the same keys, tensor names and types -- norms and the router
                      f32, the rest f16), tensor by tensor so memory stays at one tensor; values normal with
                      std 0.02 (transformers' initializer_range), norms 1, each tensor seeded by its name
                      (so a layer's weights are the same in a 1-layer and a 4-layer file)
    2. Q4_K_M GGUF    llama.cpp's own `llama-quantize ... Q4_K_M` on that file (its mix: experts' gate/up Q4_K,
                      down Q6_K on its "more bits" layers and Q4_K elsewhere, attn_v likewise, output Q6_K)

The vocabulary is Qwen's own BPE (151,936 entries, the size Qwen3 uses), copied with its chat template from the
installed Qwen2.5-Coder GGUF. Files are cached under ~/.cache/haltwise/moebench/ by a digest of the shape, the
layer count and this recipe; the f16 step is deleted once quantized.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("HALTWISE_CACHE_DIR", Path.home() / ".cache" / "haltwise")) / "moebench"
TOKENIZER_MODEL = "qwen2.5-coder-0.5b"      # catalog name: the GGUF whose tokenizer.* keys are copied
RECIPE = 1                                  # bump when the written file changes
ARCH = "qwen3moe"
STD = 0.02


@dataclass(frozen=True, slots=True)
class MoeShape:
    """Qwen3-30B-A3B's per-layer shapes (config.json) by default; the layer count is chosen per file."""
    hidden: int = 2048               # hidden_size
    heads: int = 32                  # num_attention_heads
    kv_heads: int = 4                # num_key_value_heads
    head_dim: int = 128              # head_dim (q/k/v width per head)
    experts: int = 128               # num_experts
    active: int = 8                  # num_experts_per_tok (top-k, norm_topk_prob true: qwen3moe's rule)
    expert_ffn: int = 768            # moe_intermediate_size
    dense_ffn: int = 6144            # intermediate_size (written, unused by qwen3moe)
    context: int = 40960             # max_position_embeddings
    rope_base: float = 1e6           # rope_theta
    eps: float = 1e-6                # rms_norm_eps

    def __post_init__(self) -> None:
        for name in ("hidden", "expert_ffn"):       # k-quants need whole 256-value super-blocks per row
            if getattr(self, name) % 256:
                raise ValueError(f"{name} {getattr(self, name)} is not a multiple of 256 (Q4_K/Q6_K rows)")
        if not 0 < self.active <= self.experts:
            raise ValueError(f"active experts {self.active} must be in 1..{self.experts}")


def tokenizer_source() -> Path:
    from haltwise.models.catalog import resolve_model

    return resolve_model(TOKENIZER_MODEL)


def file_for(shape: MoeShape, layers: int) -> Path:
    """Where the Q4_K_M file of `layers` layers of `shape` is cached."""
    key = json.dumps({"shape": asdict(shape), "recipe": RECIPE}, sort_keys=True).encode()
    return CACHE / f"{ARCH}-{hashlib.sha256(key).hexdigest()[:12]}-L{layers}-Q4_K_M.gguf"


def build(shape: MoeShape, layers: int, quantize_bin: Path, log=print) -> Path:
    """The cached Q4_K_M file, made now if missing (f16 by GGUFWriter, then llama-quantize)."""
    out = file_for(shape, layers)
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    f16 = out.with_name(out.name.replace("Q4_K_M", "F16"))
    log(f"writing {f16.name} ({layers} layers, gguf package)")
    write_f16(shape, layers, f16)
    log(f"llama-quantize {f16.name} -> {out.name} (Q4_K_M)")
    partial = out.with_suffix(".partial")
    done = subprocess.run([str(quantize_bin), str(f16), str(partial), "Q4_K_M", str(os.cpu_count() or 1)],
                          capture_output=True, text=True, check=False)
    f16.unlink(missing_ok=True)
    if done.returncode:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama-quantize exited with {done.returncode}: {done.stderr[-2000:]}")
    partial.rename(out)
    return out


def tensor_plan(shape: MoeShape, layers: int) -> list[tuple[str, tuple[int, ...], str]]:
    """(GGUF name, numpy shape (outer first), "f32" | "f16" | "ones") in the converter's order."""
    s, q, kv = shape, shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    plan = [("token_embd.weight", (vocab_size(), s.hidden), "f16")]
    for i in range(layers):
        b = f"blk.{i}."
        plan += [(b + "attn_norm.weight", (s.hidden,), "ones"),
                 (b + "attn_q.weight", (q, s.hidden), "f16"),
                 (b + "attn_k.weight", (kv, s.hidden), "f16"),
                 (b + "attn_v.weight", (kv, s.hidden), "f16"),
                 (b + "attn_output.weight", (s.hidden, q), "f16"),
                 (b + "attn_q_norm.weight", (s.head_dim,), "ones"),
                 (b + "attn_k_norm.weight", (s.head_dim,), "ones"),
                 (b + "ffn_norm.weight", (s.hidden,), "ones"),
                 (b + "ffn_gate_inp.weight", (s.experts, s.hidden), "f32"),      # the router: kept f32
                 (b + "ffn_gate_exps.weight", (s.experts, s.expert_ffn, s.hidden), "f16"),
                 (b + "ffn_up_exps.weight", (s.experts, s.expert_ffn, s.hidden), "f16"),
                 (b + "ffn_down_exps.weight", (s.experts, s.hidden, s.expert_ffn), "f16")]
    return plan + [("output_norm.weight", (s.hidden,), "ones"), ("output.weight", (vocab_size(), s.hidden), "f16")]


def vocab_size() -> int:
    return len(_tokenizer_fields()["tokenizer.ggml.tokens"][0])


def values(name: str, dims: tuple[int, ...], kind: str) -> np.ndarray:
    """A tensor's values: ones for norms, else N(0, STD) from a generator seeded by the name."""
    if kind == "ones":
        return np.ones(dims, dtype=np.float32)
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))
    data = rng.standard_normal(dims, dtype=np.float32)
    data *= STD
    return data.astype(np.float16) if kind == "f16" else data


def write_f16(shape: MoeShape, layers: int, path: Path) -> None:
    import gguf

    s = shape
    w = gguf.GGUFWriter(path, ARCH)
    w.add_name(f"random Qwen3-30B-A3B shapes, {layers} layers")
    w.add_block_count(layers)
    w.add_context_length(s.context)
    w.add_embedding_length(s.hidden)
    w.add_feed_forward_length(s.dense_ffn)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.eps)
    w.add_expert_count(s.experts)
    w.add_expert_used_count(s.active)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_expert_feed_forward_length(s.expert_ffn)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, (value, vtype, sub_type) in _tokenizer_fields().items():
        w.add_key_value(key, value, vtype, sub_type)
    plan = tensor_plan(shape, layers)
    for name, dims, kind in plan:
        dtype = np.float16 if kind == "f16" else np.float32
        w.add_tensor_info(name, dims, np.dtype(dtype), int(np.prod(dims)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, dims, kind in plan:
        w.write_tensor_data(values(name, dims, kind))
    w.close()


_FIELDS: dict = {}


def _tokenizer_fields() -> dict:
    """tokenizer.* keys of the Qwen GGUF: key -> (value, type, array sub-type)."""
    if not _FIELDS:
        from gguf import GGUFReader, GGUFValueType

        for key, field in GGUFReader(tokenizer_source()).fields.items():
            if key.startswith("tokenizer."):
                array = field.types[0] == GGUFValueType.ARRAY
                _FIELDS[key] = (field.contents(), field.types[0], field.types[-1] if array else None)
    return _FIELDS
