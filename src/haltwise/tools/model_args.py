"""Model and engine options shared by the commands that load a model."""
from __future__ import annotations

import argparse
import json

from haltwise.config import (DEFAULT_DRAFT_MODEL, ENGINE_DTYPES, KV_AUTO_FRACTION, KV_CACHE_DTYPES,
                             SCHEDULING_POLICIES, EngineConfig)
from haltwise.memory_size import parse_memory


def add_model_arguments(p: argparse.ArgumentParser, several: bool = False) -> None:
    """several: --model may be given more than once (haltwise serve): args.model is then a list or None."""
    p.add_argument("--model", default=None, action="append" if several else "store",
                   help="GGUF file, Hugging Face directory, or a named model: smollm2-135m (default), gemma3-270m, "
                        "qwen2.5-coder-0.5b" + ("; repeat it to serve several (the first is the default for "
                                                "requests that name none)" if several else ""))
    p.add_argument("--chat-template", type=chat_template_file, default=None, metavar="FILE",
                   help="Jinja chat template (.jinja, or a JSON with \"chat_template\") replacing the model's; "
                        "needed for chat with a model whose file has none, e.g. gemma3-270m (base)")
    p.add_argument("--dtype", default="auto", choices=list(ENGINE_DTYPES),
                   help="auto (default): float32 activations and KV, each linear in the format measured fastest "
                        "and correct on this CPU (see `haltwise plan`); float32: plain float32, reproduces "
                        "transformers' float32 greedy output exactly; bfloat16: bf16 weights, compute and KV")
    p.add_argument("--max-model-len", type=int, default=None, help="context window (default: what the model supports)")
    p.add_argument("--rope-scaling", type=_json_object, default=None,
                   help='Hugging Face rope_scaling JSON, e.g. \'{"rope_type":"yarn","factor":2,'
                        '"original_max_position_embeddings":8192}\'')
    p.add_argument("--kv-cache-memory", default="auto",
                   help="KV pool: bytes (512MiB, 2GB), a fraction of RAM (0.1), or auto (default): "
                        f"{KV_AUTO_FRACTION * 100:.0f}%% of available RAM, more if one --max-model-len sequence needs it")
    p.add_argument("--kv-cache-dtype", default="auto", choices=list(KV_CACHE_DTYPES),
                   help="how the KV cache stores keys and values: auto (default): int8 under --dtype auto, else "
                        "the activations' dtype; int8 (a float32 scale per head row, ~3.8x smaller than "
                        "float32), bfloat16, float32. See docs/benchmarks.md, \"KV cache quality\"")
    p.add_argument("--expert-weights", default="auto", choices=["auto", "mapped", "resident"],
                   help="a mixture-of-experts model's routed experts: resident (copied into memory: fastest), "
                        "mapped (kept in files read as tokens need them: a model larger than the memory runs), "
                        "auto (default): mapped when the GGUF is larger than half the memory. Same output either "
                        "way (docs/native-moe.md)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    p.add_argument("--max-num-seqs", type=int, default=64, help="sequences per engine step")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048, help="token budget per engine step")
    p.add_argument("--no-chunked-prefill", action="store_true", help="run each prompt's prefill in one step")
    p.add_argument("--step-target", type=float, default=0.5, metavar="SECONDS",
                   help="size prefill chunks so a step takes about this long here (measured); 0 = budget only")
    p.add_argument("--no-prefix-caching", action="store_true", help="do not share prompt blocks between requests")
    p.add_argument("--swa-full", action="store_true",
                   help="sliding-window layers (Gemma 3) keep every position and the prefix cache stays on, instead "
                        "of keeping only their window in a small pool of their own (as llama.cpp's --swa-full)")
    p.add_argument("--max-queue", type=int, default=256, help="waiting requests beyond which admission answers 503")
    p.add_argument("--watermark", type=float, default=0.9, help="admit while used KV blocks stay under this share")
    p.add_argument("--scheduling-policy", default="fcfs", choices=list(SCHEDULING_POLICIES),
                   help="fcfs: arrival order (a request's `priority` must be 0); priority: lower `priority` first, "
                        "aged so nothing starves (docs/parameters.md)")
    p.add_argument("--priority-aging-steps", type=int, default=64, metavar="N",
                   help="priority policy: a waiting or running request gains one priority level per N engine steps")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    p.add_argument("--nondeterministic-kernels", action="store_true",
                   help="opt in to the fastest kernel format per row bucket (dtype auto): a request's tokens may "
                        "then depend on the other requests in its steps, its chunking and prefix-cache hits. "
                        "Default: one batch-invariant format per linear and every step through the native stack")
    p.add_argument("--speculative-tokens", type=int, default=2, metavar="K",
                   help="prompt-lookup speculative decoding: verify up to K n-gram draft tokens per decode step "
                        "(exact: the same tokens as without it; default 2, 0 = off). See docs/benchmarks.md, "
                        "\"Speculative decoding\" for the measured speed-up")
    p.add_argument("--speculative-max-batch", type=batch_limit, default=1, metavar="N",
                   help="draft only in steps with at most N decoding sequences (default 1; 'none' = any "
                        "number): with several rows a step is compute bound and draft rows cost as much "
                        "as decode rows")
    p.add_argument("--draft-model", default=DEFAULT_DRAFT_MODEL, metavar="NAME|PATH",
                   help="draft-model speculative decoding: a smaller model with the same vocabulary (a catalog "
                        "name or a GGUF path) drafts tokens the model verifies in one step; exact, like prompt "
                        "lookup, which it replaces. 'auto': the draft the catalog pairs with --model "
                        f"(qwen2.5-coder-1.5b -> qwen2.5-coder-0.5b) when installed; 'none': off (default "
                        f"{DEFAULT_DRAFT_MODEL}). See docs/draft-model.md")
    p.add_argument("--draft-tokens", type=int, default=8, metavar="K",
                   help="the draft model's longest draft; its length adapts to the acceptance below this (default 8)")
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)  # random tiny model, for tests


def batch_limit(text: str) -> int | None:
    """argparse type of a speculative_max_batch value: a positive count, or 'none' (None)."""
    if text.lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a count >= 1 or 'none', got {text!r}")
    return value


def chat_template_file(path: str) -> str:
    """argparse type of --chat-template: the template text of FILE (compiled once to check it)."""
    from haltwise.tokenizer.chat import load_chat_template

    try:
        return load_chat_template(path)
    except (OSError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--rope-scaling must be a JSON object")
    return value


def engine_config_from(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        dtype=args.dtype, block_size=args.block_size, kv_cache_memory=parse_memory(args.kv_cache_memory),
        max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, enable_chunked_prefill=not args.no_chunked_prefill,
        step_target_s=args.step_target,
        enable_prefix_caching=not args.no_prefix_caching, swa_full=args.swa_full, max_queue=args.max_queue,
        watermark=args.watermark,
        batch_invariant=not args.nondeterministic_kernels, kv_cache_dtype=args.kv_cache_dtype,
        expert_weights=args.expert_weights,
        num_threads=args.threads, speculative_tokens=args.speculative_tokens,
        speculative_max_batch=args.speculative_max_batch, scheduling_policy=args.scheduling_policy,
        priority_aging_steps=args.priority_aging_steps, draft_model=args.draft_model,
        draft_max_tokens=args.draft_tokens)


def read_model_config(model: str | None):
    """(path, ModelConfig) of a GGUF file or HF directory, without loading weights."""
    from haltwise.gguf import reader as gguf_reader
    from haltwise.models import hf_dir
    from haltwise.models.catalog import resolve_model

    path = resolve_model(model)
    if path.is_dir():
        return path, hf_dir.hf_config(path)
    return path, gguf_reader.gguf_config(gguf_reader.open_gguf(path), path)


def load_tokenizer(path):
    from haltwise.tokenizer.tokenizer import Tokenizer

    return Tokenizer.from_hf_dir(path) if path.is_dir() else Tokenizer.from_gguf(path)
