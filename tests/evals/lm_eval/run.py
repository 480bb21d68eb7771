"""lm-evaluation-harness against `haltwise serve`: a small multiple-choice task from a local file (no hub
download), scored through `local-completions` (echo + logprobs prompt scoring) and by the harness's own `hf`
model on the same GGUF in transformers float32; prints both accuracies and their difference.

Run with the lm-eval venv (make lmeval): /work/venvs/lmeval/bin/python tests/evals/lm_eval/run.py
The server runs in the project's Python (HALTWISE_PYTHON, default the current one) with its default flags.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def task_dir(tmp: Path) -> Path:
    text = (HERE / "tiny_mc.yaml.in").read_text().replace("@DATA@", str(HERE / "tiny_mc.jsonl"))
    (tmp / "tiny_mc.yaml").write_text(text)
    return tmp


def export_tokenizer(gguf: Path, out: Path) -> Path:
    """The model's tokenizer as an HF directory, read from the GGUF by transformers (local, no hub)."""
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(out)
    return out


def serve(port: int, python: str) -> subprocess.Popen:
    proc = subprocess.Popen([python, "-m", "haltwise.cli", "serve", "--port", str(port), "--served-model-name",
                             "smol"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit("haltwise serve exited")
        time.sleep(1)
    proc.kill()
    raise SystemExit("haltwise serve did not become ready")


def evaluate(model: str, model_args: str, tasks: Path) -> float:
    import lm_eval
    from lm_eval.tasks import TaskManager

    out = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=["haltwise_tiny_mc"],
                                  task_manager=TaskManager(include_path=str(tasks)), batch_size=1)
    return float(out["results"]["haltwise_tiny_mc"]["acc,none"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", default=None, help="the served model's GGUF (default: the default model)")
    parser.add_argument("--skip-hf", action="store_true", help="only the served model")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    python = os.environ.get("HALTWISE_PYTHON", sys.executable)
    gguf = Path(args.gguf or subprocess.check_output(
        [python, "-c", "from haltwise.models.catalog import resolve_model; print(resolve_model(None))"],
        text=True).strip())
    with tempfile.TemporaryDirectory() as tmp:
        tasks, tokenizer = task_dir(Path(tmp)), export_tokenizer(gguf, Path(tmp) / "tokenizer")
        port = free_port()
        proc = serve(port, python)
        try:
            served = evaluate("local-completions", f"model=smol,base_url=http://127.0.0.1:{port}/v1/completions,"
                              f"tokenizer={tokenizer},tokenizer_backend=huggingface,tokenized_requests=True,"
                              "num_concurrent=1,max_retries=1", tasks)
        finally:
            proc.terminate()
            proc.wait(60)
        result = {"task": "haltwise_tiny_mc (24 questions)", "haltwise_local_completions_acc": served}
        if not args.skip_hf:
            hf = evaluate("hf", f"pretrained={gguf.parent},gguf_file={gguf.name},dtype=float32,device=cpu", tasks)
            result.update(hf_transformers_acc=hf, difference_points=round(100 * (served - hf), 2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
