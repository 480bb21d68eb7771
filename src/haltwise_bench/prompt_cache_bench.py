"""`haltwise bench prompt-cache`: time to first token of a long prompt cold, from the pool, from RAM, from disk.

For each prompt length (default 2000 and 7900 tokens of /work/shared/data/longtext, or any --text file), over
HTTP against `haltwise serve` as users run it (max_tokens 1: the answer's latency is the TTFT):

    cold  the first request of that prompt (a full prefill; its blocks go to the disk tier as they are computed)
    pool  the same request again (the KV pool's own prefix cache)
    ram   again after a filler prompt as long as the pool pushed its blocks out (the RAM tier restores them)
    disk  again after a restart on the same --prompt-cache-dir with the RAM tier off, the page cache dropped
          first where this process may (root: /proc/sys/vm/drop_caches), else said in the table

Beside it, when llama.cpp's binaries are there (`make bench-setup`, or --llama-dir), llama-server with
--cache-ram on the same GGUF: cold, then the same prompt again (its slot keeps it), then after a filler (its RAM
cache). Absent binaries are reported and skipped. Figures are for the host they ran on.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

from haltwise_bench.common import longtext_files
from haltwise_bench import llama_cpp
from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd



def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF file or named model (default smollm2-135m)")
    p.add_argument("--lengths", default="2000,7900", help="prompt lengths in tokens (comma-separated)")
    p.add_argument("--text", default=None, help="a text file to cut prompts from (default: the longtext corpus)")
    p.add_argument("--threads", type=int, default=None, help="threads for both servers (default: all cores)")
    p.add_argument("--llama-dir", default=None, help="llama.cpp binaries (default: make bench-setup's)")


def _tokens(model: str | None, text_file: str | None, lengths: list[int]) -> tuple[dict[int, list[int]], list[int]]:
    """A prompt of each length (disjoint slices) and a filler as long as the longest."""
    from haltwise.models.catalog import resolve_model
    from haltwise.tokenizer.tokenizer import Tokenizer

    files = [Path(text_file)] if text_file else longtext_files()
    tokenizer = Tokenizer.from_gguf(resolve_model(model))
    ids = []
    for f in files:
        ids += tokenizer.encode(f.read_text(errors="replace"), add_special_tokens=False)
    need = sum(lengths) + max(lengths)
    if len(ids) < need:
        raise SystemExit(f"the text gives {len(ids)} tokens, {need} are needed")
    prompts, at = {}, 0
    for n in lengths:
        prompts[n], at = ids[at:at + n], at + n
    return prompts, ids[at:at + max(lengths)]


def _ttft(url: str, path: str, body: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    r = httpx.post(url + path, json=body, timeout=3600)
    r.raise_for_status()
    return time.perf_counter() - start, r.json()


def _drop_page_cache() -> str:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "page cache dropped"
    except OSError as e:
        return f"page cache NOT dropped ({e.strerror}): disk figures read from the page cache"


def _haltwise(args, prompts, filler, rows) -> str:
    root = Path(tempfile.mkdtemp(prefix="bench-prompt-cache-"))
    longest = max(prompts)
    pool = int(1.2 * (longest + 64)) * _bytes_per_token(args.model)
    common = ["--max-model-len", str(longest + 64), "--kv-cache-memory", str(pool), "--prompt-cache-dir",
              str(root), "--prompt-cache-disk", "4GiB", "--speculative-tokens", "0"]
    if args.threads:
        common += ["--threads", str(args.threads)]
    body = lambda ids: {"prompt": ids, "max_tokens": 1, "temperature": 0}   # noqa: E731
    port = free_port()
    with ServerProcess(haltwise_server_cmd(port, model=args.model, extra=tuple(common)), port, "haltwise",
                       ready_path="/ready", start_timeout_s=900) as server:
        for n, ids in prompts.items():
            for what in ("cold", "pool", "ram"):
                if what == "ram":
                    _ttft(server.base_url, "/v1/completions", body(filler))
                seconds, out = _ttft(server.base_url, "/v1/completions", body(ids))
                rows.append(("haltwise", n, what, seconds, out["usage"].get("prompt_cache")))
                print(f"haltwise {n} {what}: {seconds:.2f}s {out['usage'].get('prompt_cache')}", file=sys.stderr)
    note = _drop_page_cache()
    port = free_port()
    with ServerProcess(haltwise_server_cmd(port, model=args.model,
                                           extra=(*common, "--prompt-cache-ram", "0")), port, "haltwise",
                       ready_path="/ready", start_timeout_s=900) as server:
        for n, ids in prompts.items():
            seconds, out = _ttft(server.base_url, "/v1/completions", body(ids))
            rows.append(("haltwise", n, "disk", seconds, out["usage"].get("prompt_cache")))
    return note


def _bytes_per_token(model: str | None) -> int:
    from haltwise.config import AUTO_KV_DTYPE
    from haltwise.tools.model_args import read_model_config

    return read_model_config(model)[1].kv_bytes_per_token(AUTO_KV_DTYPE)


def _llama(args, prompts, filler, rows) -> str:
    directory = llama_cpp.bin_dir(args.llama_dir)
    if llama_cpp.missing_binaries(directory):
        return f"llama-server: not built in {directory} (make bench-setup); skipped"
    from haltwise.models.catalog import resolve_model

    port = free_port()
    cmd = llama_cpp.llama_server_cmd(directory, port, resolve_model(args.model), args.threads or os.cpu_count(), 1,
                                     max(prompts) + 64) + ["--cache-ram", "8192"]
    body = lambda ids: {"prompt": ids, "n_predict": 1, "temperature": 0, "cache_prompt": True}   # noqa: E731
    with ServerProcess(cmd, port, "llama-server", ready_path="/health", start_timeout_s=600) as server:
        for n, ids in prompts.items():
            for what in ("cold", "slot", "ram"):
                if what == "ram":
                    _ttft(server.base_url, "/completion", body(filler))
                seconds, _ = _ttft(server.base_url, "/completion", body(ids))
                rows.append(("llama-server", n, what, seconds, None))
    return "llama-server --cache-ram 8192 (MiB), one slot"


def run(args: argparse.Namespace) -> int:
    lengths = [int(x) for x in args.lengths.split(",")]
    prompts, filler = _tokens(args.model, args.text, lengths)
    rows: list[tuple] = []
    notes = [_haltwise(args, prompts, filler, rows), _llama(args, prompts, filler, rows)]
    cold = {(s, n): t for s, n, w, t, _ in rows if w == "cold"}
    print(f"{'server':<13}{'tokens':>7}  {'from':<6}{'TTFT s':>9}{'x cold':>8}  restored (pool/ram/disk tokens)")
    for server, n, what, seconds, tiers in rows:
        speedup = cold[server, n] / seconds if seconds else float("inf")
        print(f"{server:<13}{n:>7}  {what:<6}{seconds:>9.2f}{speedup:>8.1f}  {tiers or ''}")
    for note in notes:
        print(f"# {note}")
    return 0
