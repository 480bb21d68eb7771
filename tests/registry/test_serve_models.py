"""`haltwise serve --models-dir` as a real process over the catalog GGUFs (symlinked into a temp folder)."""
from __future__ import annotations

import sys
from pathlib import Path

import httpx
import openai
import pytest

from tests.server.serve_process import ServeProcess, run_serve

MODELS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b")


def models_dir(tmp_path: Path, names=MODELS) -> Path:
    from haltwise.models.catalog import resolve_model

    for name in names:
        try:
            (tmp_path / f"{name}.gguf").symlink_to(resolve_model(name))
        except Exception as exc:   # a model package that is not installed
            pytest.skip(f"{name}: {exc}")
    return tmp_path


class Several(ServeProcess):
    def __init__(self, args: list[str]):
        super().__init__([])
        self.cmd = [sys.executable, "-m", "haltwise.cli", "serve", "--port", str(self.port), "--threads", "1",
                    "--shutdown-grace", "1", *args]


def resident(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def test_a_budget_too_small_is_503_and_unknown_models_404(tmp_path):
    with Several(["--models-dir", str(models_dir(tmp_path)), "--models-memory", "64MiB"]) as s:
        rows = httpx.get(f"{s.url}/v1/models").json()["data"]
        assert [(r["id"], r["status"]["value"]) for r in rows] == sorted((m, "unloaded") for m in MODELS)
        r = httpx.post(f"{s.url}/v1/completions", json={"model": "qwen2.5-coder-0.5b", "prompt": "x"}, timeout=120)
        assert r.status_code == 503 and r.json()["error"]["code"] == "insufficient_memory", r.text
        assert "needs" in r.json()["error"]["message"] and "free" in r.json()["error"]["message"]
        assert "retry-after" in r.headers
        with pytest.raises(openai.NotFoundError):
            openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0).completions.create(
                model="llama-70b", prompt="x")
        assert httpx.get(f"{s.url}/health").status_code == 200 and s.proc.poll() is None


def test_several_models_refuse_single_model_options(tmp_path):
    out = run_serve(["--models-dir", str(models_dir(tmp_path, MODELS[:1])), "--served-model-name", "x"])
    assert out.returncode == 2 and "--served-model-name serves one model" in out.stderr


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_unload_returns_memory_and_reload_gives_the_same_tokens(tmp_path):
    folder = models_dir(tmp_path, MODELS[:1])
    weights = (folder / "smollm2-135m.gguf").stat().st_size
    with Several(["--models-dir", str(folder), "--kv-cache-memory", "64MiB"]) as s:
        oa = openai.OpenAI(base_url=f"{s.url}/v1", api_key="x", max_retries=0, timeout=3000)

        def texts() -> list[str]:
            return [oa.completions.create(model="smollm2-135m", prompt="The sky is", max_tokens=12, temperature=0,
                                          timeout=3000).choices[0].text,
                    oa.completions.create(model="smollm2-135m", prompt="Once upon", max_tokens=12, temperature=0.9,
                                          seed=11, timeout=3000).choices[0].text]

        before = resident(s.proc.pid)
        first = texts()
        loaded = resident(s.proc.pid)
        r = httpx.post(f"{s.url}/models/unload", json={"model": "smollm2-135m"}, timeout=120)
        assert r.json()["status"] == {"value": "unloaded"}
        unloaded = resident(s.proc.pid)
        assert loaded - unloaded >= weights, (before, loaded, unloaded, weights)
        assert texts() == first


def test_the_prompt_cache_ram_budget_is_kept_out_of_the_models_budget(tmp_path):
    import argparse

    from haltwise.engine.prompt_cache.prompt_cache import PromptTiers
    from haltwise.engine.prompt_cache.ram_tier import RamTier
    from haltwise.server import serve, serve_models

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(["--models-dir", str(models_dir(tmp_path, MODELS[:1])), "--memory-reserve", "0"])
    tiers = PromptTiers(ram=RamTier(64 << 20))
    registry = serve_models.build_registry(args, tiers)
    registry.budget.available = lambda: 1 << 30
    assert registry.budget.free(0) == (1 << 30) - (64 << 20)
    bare = serve_models.build_registry(args)                    # no tiers: nothing kept out
    bare.budget.available = lambda: 1 << 30
    assert bare.budget.free(0) == 1 << 30
