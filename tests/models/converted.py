"""Test helper: tiny random-weight transformers models of the newer families, converted to GGUF by
llama.cpp's own convert_hf_to_gguf.py (vendored in the llama-cpp-python sdist; `make converter` fetches it).

Each fixture is built once into ~/.cache/haltwise/fixtures/<arch>-<digest>/ (HALTWISE_FIXTURE_DIR overrides):
    hf/          the float32 transformers model, SmolLM2's BPE tokenizer (+ the family's special tokens) and
                 the family's real chat template (llama.cpp's models/templates copy)
    f32.gguf     the converter's --outtype f32
    q8_0.gguf    the converter's --outtype q8_0
The digest covers the spec below, the transformers version and the converter's bytes, so a change rebuilds.
Tests skip, saying why, where the converter is missing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import transformers

LLAMA_CPP_PY = "0.3.36"
CONVERTER_DIR = Path(os.environ.get("HALTWISE_CONVERTER_DIR", Path.home() / ".cache/haltwise/converter"))
LLAMA_CPP = CONVERTER_DIR / f"llama_cpp_python-{LLAMA_CPP_PY}" / "vendor" / "llama.cpp"
FIXTURES = Path(os.environ.get("HALTWISE_FIXTURE_DIR", Path.home() / ".cache/haltwise/fixtures"))
SMALL = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             max_position_embeddings=512, rms_norm_eps=1e-6)
MOE = dict(intermediate_size=96, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2)


@dataclass(frozen=True)
class Spec:
    config_class: str            # transformers config class
    config: dict                 # its arguments (vocab size, tokens ids added from the tokenizer)
    template: str                # llama.cpp models/templates/<template>, or tests/models/data/<template>
    end_token: str               # the family's end-of-turn token (added as special when the base lacks it)
    added: tuple[str, ...] = ()  # further special tokens the template writes
    tokenizer_config: dict = field(default_factory=dict)
    sentencepiece: bool = False  # the converter reads this family's vocabulary from tokenizer.model (gemma2)
    mxfp4: bool = False          # also an MXFP4 checkpoint of the same model, converted to mxfp4.gguf (gpt-oss)


SPECS = {
    "qwen3moe": Spec("Qwen3MoeConfig", dict(SMALL, **MOE, norm_topk_prob=True, tie_word_embeddings=False),
                     "Qwen-Qwen3-0.6B.jinja", "<|im_end|>", ("<think>", "</think>")),
    "qwen2moe": Spec("Qwen2MoeConfig", dict(SMALL, **MOE, shared_expert_intermediate_size=48, norm_topk_prob=False,
                                            tie_word_embeddings=True, qkv_bias=True),
                     "Qwen-Qwen2.5-7B-Instruct.jinja", "<|im_end|>"),
    # every 4th layer without RoPE (no_rope_layer_interval 4): layer 3 of 4
    "smollm3": Spec("SmolLM3Config", dict(SMALL, intermediate_size=96, tie_word_embeddings=True),
                    "HuggingFaceTB-SmolLM3-3B.jinja", "<|im_end|>", ("<think>", "</think>")),
    # Phi-4-mini's shape and chat template (data/, with its tool tokens): fused qkv / gate_up, partial rotary
    # (0.75: 12 of 16 dims), LongRoPE short/long factors around an original window
    # of 128 (prompts of PHI3_LONG_PROMPT tokens or more take the long ones)
    "phi3": Spec("Phi3Config", dict(SMALL, intermediate_size=96, tie_word_embeddings=False,
                                    original_max_position_embeddings=128,
                                    rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                         partial_rotary_factor=0.75,
                                                         short_factor=[1.0, 1.1, 1.3, 1.7, 2.2, 2.9],
                                                         long_factor=[1.0, 1.5, 2.5, 4.0, 7.0, 12.0])),
                 "microsoft-Phi-4-mini-instruct.jinja", "<|end|>",
                 ("<|user|>", "<|assistant|>", "<|system|>", "<|tool|>", "<|/tool|>", "<|tool_call|>",
                  "<|/tool_call|>"),
                 tokenizer_config={"tokenizer_class": "GPT2Tokenizer"}),
    # every 2nd layer global, window 8 (prompts here span several); caps low enough that random weights reach
    # them; query_pre_attn_scalar = head_dim, which GGUF leaves implicit (llama.cpp's rule below 27B)
    "gemma2": Spec("Gemma2Config", dict(SMALL, intermediate_size=96, sliding_window=8, query_pre_attn_scalar=16,
                                        attn_logit_softcapping=3.0, final_logit_softcapping=5.0),
                   "google-gemma-2-2b-it.jinja", "<end_of_turn>", ("<start_of_turn>",), sentencepiece=True),
    # 8 experts of width 32, top-2; every 2nd layer global (window 8); YaRN x4 over 128 without rounding (as the
    # released config); harmony's special tokens
    "gpt-oss": Spec("GptOssConfig", dict(SMALL, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                                         sliding_window=8, tie_word_embeddings=False, swiglu_limit=7.0,
                                         rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=4.0,
                                                              beta_fast=32.0, beta_slow=1.0, truncate=False,
                                                              original_max_position_embeddings=128)),
                    "openai-gpt-oss-120b.jinja", "<|return|>",
                    ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|constrain|>"), mxfp4=True),
}
MOE_FAMILIES = ("qwen3moe", "qwen2moe", "gpt-oss")


def converter_missing() -> str | None:
    script = LLAMA_CPP / "convert_hf_to_gguf.py"
    if not script.is_file():
        return f"llama.cpp's converter is not at {script} (run `make converter`)"
    return None


def require_converter() -> None:
    why = converter_missing()
    if why:
        pytest.skip(why)


def _digest(arch: str) -> str:
    spec = SPECS[arch]
    flags = {k: True for k in ("sentencepiece", "mxfp4") if getattr(spec, k)}   # only where set: other digests stay
    h = hashlib.sha256(json.dumps([arch, spec.config_class, spec.config, spec.template, spec.end_token, spec.added,
                                   spec.tokenizer_config, *([flags] if flags else []), transformers.__version__],
                                  sort_keys=True).encode())
    h.update((LLAMA_CPP / "convert_hf_to_gguf.py").read_bytes())
    return h.hexdigest()[:12]


def _base_tokenizer() -> Path:
    """SmolLM2's tokenizer (read by transformers from its GGUF), saved once: llama.cpp's converter knows its
    pre-tokenizer ("smollm"), so every fixture's GGUF carries a real BPE vocabulary."""
    out = FIXTURES / "tokenizer-smollm2"
    if not (out / "tokenizer.json").is_file():
        from haltwise.models.loader import default_model_path
        path = default_model_path()
        tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        tmp = out.with_suffix(".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tok.save_pretrained(tmp)
        tmp.rename(out)
    return out


@dataclass(frozen=True)
class Fixture:
    arch: str
    root: Path

    @property
    def hf(self) -> Path:
        return self.root / "hf"

    def gguf(self, outtype: str = "f32") -> Path:
        return self.root / f"{outtype}.gguf"

    def model(self):
        """The float32 transformers model (the oracle)."""
        return transformers.AutoModelForCausalLM.from_pretrained(self.hf, dtype=torch.float32).eval()

    def tokenizer(self):
        return transformers.AutoTokenizer.from_pretrained(self.hf)


def fixture(arch: str) -> Fixture:
    """The converted fixture of `arch`, built on first use (a minute or so)."""
    require_converter()
    root = FIXTURES / f"{arch}-{_digest(arch)}"
    if not (root / "q8_0.gguf").is_file():
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        _build(arch, tmp)
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    return Fixture(arch, root)


def _sentencepiece_tokenizer(root: Path, symbols: tuple[str, ...]) -> Path:
    """A small SentencePiece BPE model (byte fallback, the family's turn markers as user symbols) trained on
    transformers' generation source, saved with the HF tokenizer transformers derives from it: families whose
    converter reads only tokenizer.model (gemma2) get a real SentencePiece vocabulary of their own."""
    import inspect

    import sentencepiece
    from transformers.generation import utils

    out = root / "spm"
    out.mkdir(parents=True)
    corpus = out / "corpus.txt"
    corpus.write_text(inspect.getsource(utils), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(out / "tokenizer"), vocab_size=1000, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, user_defined_symbols=list(symbols), pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>", num_threads=1, minloglevel=2,
        add_dummy_prefix=False, split_digits=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity")
    corpus.unlink()
    (out / "tokenizer.vocab").unlink()
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GemmaTokenizer"}))
    return out


def _template(name: str) -> str:
    """A chat template: this repository's copy (data/SOURCE.md says where from) or llama.cpp's."""
    ours = Path(__file__).parent / "data" / name
    return (ours if ours.is_file() else LLAMA_CPP / "models" / "templates" / name).read_text(encoding="utf-8")


def _build(arch: str, root: Path) -> None:
    spec = SPECS[arch]
    symbols = (spec.end_token, *spec.added)
    base = _sentencepiece_tokenizer(root, symbols) if spec.sentencepiece else _base_tokenizer()
    tok = transformers.AutoTokenizer.from_pretrained(base)
    # (a SentencePiece vocabulary holds the symbols already: they are only marked special)
    tok.add_special_tokens({"additional_special_tokens": list(symbols) if spec.sentencepiece else
                            [t for t in symbols if t not in tok.get_vocab()]})
    tok.eos_token = spec.end_token
    tok.chat_template = _template(spec.template)
    ids = tok.get_vocab()
    config = getattr(transformers, spec.config_class)(
        **spec.config, vocab_size=len(tok), eos_token_id=ids[spec.end_token], bos_token_id=tok.bos_token_id,
        pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():   # norms and biases perturbed so they matter; routers (and sinks) spread so they differ
        for name, p in model.named_parameters():
            # (gpt-oss's gate_up too: its GLU clamps at swiglu_limit, which small weights never reach)
            router = name.endswith(("mlp.gate.weight", "mlp.router.weight", "self_attn.sinks")) or \
                (spec.mxfp4 and name.endswith("experts.gate_up_proj"))
            p.add_((0.3 if "norm" in name else 1.0 if router else 0.05) * torch.randn_like(p))
    hf = root / "hf"
    model.save_pretrained(hf, safe_serialization=True)
    tok.save_pretrained(hf)
    if spec.sentencepiece:
        shutil.copy(base / "tokenizer.model", hf / "tokenizer.model")
    if spec.tokenizer_config:
        cfg_path = hf / "tokenizer_config.json"
        cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), **spec.tokenizer_config}, indent=1))
    for outtype in ("f32", "q8_0"):
        convert(hf, root / f"{outtype}.gguf", outtype)
    if spec.mxfp4:
        _write_mxfp4(hf, root / "hf-mxfp4")
        convert(root / "hf-mxfp4", root / "mxfp4.gguf", "f32")


MXFP4_TENSORS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def mxfp4_pack(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A stacked expert weight as transformers holds it, (E, in, out) float32 -> the checkpoint's MXFP4 pair as
    OpenAI's gpt-oss files store it: blocks (E, out, in / 32, 16) uint8, two e2m1 codes a byte (element 2j low,
    2j + 1 high), and scales (E, out, in / 32) uint8, e8m0 biased by 127. Codes and scales chosen by gguf-py's
    MXFP4 quantizer (its scale byte is the same e8m0; its value table the same codes, doubled)."""
    from gguf import GGMLQuantizationType, quants

    rows = w.transpose(1, 2).contiguous()                                  # (E, out, in)
    E, out, width = rows.shape
    packed = quants.quantize(rows.reshape(-1, width).numpy(), GGMLQuantizationType.MXFP4)
    blocks = torch.from_numpy(packed.reshape(-1, 17))                      # (E * out * in / 32, 17)
    scales, qs = blocks[:, 0], blocks[:, 1:]
    codes = torch.cat((qs & 0x0F, qs >> 4), dim=1)                         # ggml: element i low, i + 16 high
    hf = codes[:, 0::2] | (codes[:, 1::2] << 4)                            # (n, 16)
    return hf.reshape(E, out, width // 32, 16).contiguous(), scales.reshape(E, out, width // 32).contiguous()


def _write_mxfp4(hf: Path, out: Path) -> None:
    """The float32 checkpoint with its experts as MXFP4 blocks and scales (quantization_config mxfp4)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(hf, out)
    weights = load_file(out / "model.safetensors")
    for name in [n for n in weights if n.endswith(MXFP4_TENSORS)]:
        weights[f"{name}_blocks"], weights[f"{name}_scales"] = mxfp4_pack(weights.pop(name))
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**cfg, "quantization_config": {"quant_method": "mxfp4"}}, indent=1))


def convert(hf: Path, out: Path, outtype: str) -> None:
    """llama.cpp's convert_hf_to_gguf.py in a subprocess, its own gguf-py first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(LLAMA_CPP / "gguf-py"), str(LLAMA_CPP)]),
               NO_LOCAL_GGUF="")
    done = subprocess.run([sys.executable, str(LLAMA_CPP / "convert_hf_to_gguf.py"), str(hf), "--outfile", str(out),
                           "--outtype", outtype], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"convert_hf_to_gguf.py failed on {hf}:\n{done.stderr[-3000:]}")
