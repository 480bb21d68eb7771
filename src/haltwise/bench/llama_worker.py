"""llama-cpp-python's Python API in a process of its own, driven over stdin/stdout (JSON lines).

Why a separate process: llama.cpp and torch each bring an OpenMP thread pool whose idle threads
spin; on 2 cores, sharing one process lets torch's pool steal llama.cpp's cores (one measurement
on a loaded machine: 32-token prefill 0.3 s alone, 5-6 s after torch had run in the process).
Its own process keeps the comparison fair and still inside one `haltwise bench peers` run.
This module never imports torch.

Protocol: the parent writes {"prompt": [token ids], "max_tokens": n} per line; the worker answers
{"wall_s", "ttft_s", "new_tokens", "prompt_tokens"} per line (or {"error": message}).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from haltwise.bench.common import Timed


def llama_generate(peer: Any, prompt: list[int], max_tokens: int) -> Timed:
    """llama.cpp greedy from token ids, exactly max_tokens tokens (its generate() never stops by itself)."""
    peer.reset()  # else generate() reuses the KV of a matching prefix and skips the prefill
    start = time.perf_counter()
    ttft = None
    n = 0
    for _token in peer.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True):
        n += 1
        if ttft is None:
            ttft = time.perf_counter() - start
        if n >= max_tokens:
            break
    return Timed(time.perf_counter() - start, (ttft,), n, len(prompt))


class LlamaWorker:
    """The parent's handle: starts the worker, sends jobs, returns Timed results."""

    def __init__(self, gguf: str, n_threads: int, n_ctx: int) -> None:
        self._proc = subprocess.Popen([sys.executable, "-m", "haltwise.bench.llama_worker", gguf, str(n_threads),
                                       str(n_ctx)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def generate(self, prompt: list[int], max_tokens: int) -> Timed:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"prompt": prompt, "max_tokens": max_tokens}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"llama.cpp worker exited with {self._proc.wait()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"llama.cpp worker: {reply['error']}")
        return Timed(reply["wall_s"], (reply["ttft_s"],), reply["new_tokens"], reply["prompt_tokens"])

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()  # the worker ends at EOF
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def main(argv: list[str]) -> int:
    from llama_cpp import Llama

    gguf, n_threads, n_ctx = argv[0], int(argv[1]), int(argv[2])
    peer = Llama(model_path=gguf, n_threads=n_threads, n_ctx=n_ctx, verbose=False)
    for line in sys.stdin:
        job = json.loads(line)
        try:
            t = llama_generate(peer, job["prompt"], job["max_tokens"])
            reply = {"wall_s": t.wall_s, "ttft_s": t.ttft_s[0], "new_tokens": t.new_tokens,
                     "prompt_tokens": t.prompt_tokens}
        except Exception as e:  # reported to the parent, which raises
            reply = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(reply), flush=True)
    peer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
