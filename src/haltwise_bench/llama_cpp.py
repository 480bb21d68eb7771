"""llama.cpp's own binaries as the bench peer: where they are, and llama-bench's pp/tg figures.

`make bench-setup` builds llama-server and llama-bench from the llama-cpp-python sdist on PyPI (its
vendor/llama.cpp) into ~/.cache/haltwise/peer/build/bin; $HALTWISE_LLAMA_CPP_BIN (or --llama-bin)
points elsewhere. Nothing here imports llama.cpp: the peer always runs as its own process, so its
thread pool and torch's never share one.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

DEFAULT_BIN = Path.home() / ".cache" / "haltwise" / "peer" / "build" / "bin"
BINARIES = ("llama-server", "llama-bench")
SETUP_HINT = ("llama.cpp's llama-server / llama-bench not found in {where}. Build them with `make bench-setup` "
              "(llama.cpp from the llama-cpp-python sdist on PyPI, ~15 min on 2 cores), or point "
              "HALTWISE_LLAMA_CPP_BIN (or --llama-bin) at a directory holding both.")


def bin_dir(override: str | Path | None = None) -> Path:
    return Path(override or os.environ.get("HALTWISE_LLAMA_CPP_BIN") or DEFAULT_BIN).expanduser()


def missing_binaries(directory: Path, names: tuple[str, ...] = BINARIES) -> list[str]:
    return [b for b in names if not os.access(directory / b, os.X_OK)]


def llama_server_cmd(directory: Path, port: int, gguf: str | Path, threads: int, parallel: int,
                     ctx_per_slot: int) -> list[str]:
    """llama-server with `parallel` slots (-np) of ctx_per_slot tokens each, continuous batching on."""
    return [str(directory / "llama-server"), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            "-t", str(threads), "-np", str(parallel), "-c", str(ctx_per_slot * parallel), "--cont-batching",
            "--no-webui"]


PEER_KV_TYPES = ("q8_0", "f16")


def peer_options(kv_type: str = "q8_0", draft: str | Path | None = None) -> list[str]:
    """llama-server flags of `bench peers` on top of llama_server_cmd: the model's own chat template (--jinja),
    the KV cache type (q8_0, the default: 34 bytes per 32 values, as haltwise's int8 KV with its per-row scales;
    a quantized V cache needs flash attention on, so -fa on), and a draft model where one is given: -md loads
    it, and --spec-type draft-simple makes the server draft with it (without it, this build infers the type
    from the draft GGUF's metadata, finds none in a plain model, loads the draft and never drafts)."""
    flags = ["--jinja"]
    if kv_type == "q8_0":
        flags += ["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
    elif kv_type != "f16":
        raise ValueError(f"peer KV type {kv_type!r}: one of {', '.join(PEER_KV_TYPES)}")
    if draft is not None:
        flags += ["-md", str(draft), "--spec-type", "draft-simple"]
    return flags


def llama_bench(directory: Path, gguf: str | Path, threads: int, prompt_tokens: int, gen_tokens: int,
                repetitions: int = 1, timeout_s: float = 900.0) -> dict[str, float]:
    """llama-bench's tokens/s: {"pp<N>": prefill, "tg<M>": decode} (its average over repetitions)."""
    cmd = [str(directory / "llama-bench"), "-m", str(gguf), "-t", str(threads), "-p", str(prompt_tokens),
           "-n", str(gen_tokens), "-r", str(repetitions), "-o", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode:
        raise RuntimeError(f"llama-bench exited with {done.returncode}: {done.stderr[-2000:]}")
    return parse_llama_bench(done.stdout)


def parse_llama_bench(stdout: str) -> dict[str, float]:
    """llama-bench -o json: one object per test; n_prompt>0 is pp, n_gen>0 is tg; avg_ts = tokens/s."""
    out = {}
    for test in json.loads(stdout):
        if test.get("n_prompt"):
            out[f"pp{test['n_prompt']}"] = float(test["avg_ts"])
        elif test.get("n_gen"):
            out[f"tg{test['n_gen']}"] = float(test["avg_ts"])
    return out


def batched_bench(directory: Path, gguf: str | Path, threads: int, prompt_tokens: int, gen_tokens: int,
                  parallel: tuple[int, ...], timeout_s: float = 1800.0) -> dict[int, float]:
    """llama-batched-bench's decode rate per number of parallel sequences: {pl: tokens/s, all sequences}.

    Each sequence gets its own prompt_tokens-token prompt (not shared), then gen_tokens decode steps of pl rows
    each; speed_tg = pl * gen_tokens / the decode steps' time (the prompt step excluded)."""
    context = max(parallel) * (prompt_tokens + gen_tokens) + 64
    cmd = [str(directory / "llama-batched-bench"), "-m", str(gguf), "-t", str(threads), "-c", str(context),
           "-npp", str(prompt_tokens), "-ntg", str(gen_tokens), "-npl", ",".join(map(str, parallel)),
           "--output-format", "jsonl"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode:
        raise RuntimeError(f"llama-batched-bench exited with {done.returncode}: {done.stderr[-2000:]}")
    return parse_batched_bench(done.stdout)


def parse_batched_bench(stdout: str) -> dict[int, float]:
    """--output-format jsonl: one object per (pp, tg, pl); speed_tg is the decode rate over all pl sequences."""
    rows = (json.loads(line) for line in stdout.splitlines() if line.startswith("{"))
    return {int(r["pl"]): float(r["speed_tg"]) for r in rows}
