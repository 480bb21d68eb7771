"""bench peers: a clear message without llama-cpp-python; with it, a tiny end-to-end run."""
import importlib.util
import json

import pytest

from haltwise.bench.peers import INSTALL_HINT
from haltwise.bench.servers import haltwise_server_cmd, llama_cpp_server_cmd
from haltwise.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


def test_server_commands():
    tuned = llama_cpp_server_cmd(8001, "/m.gguf", 2, False)
    assert tuned[1:3] == ["-m", "llama_cpp.server"]
    assert tuned[tuned.index("--n_threads") + 1] == "2" and tuned[tuned.index("--interrupt_requests") + 1] == "False"
    default = llama_cpp_server_cmd(8001, "/m.gguf", None, None)
    assert "--n_threads" not in default and "--interrupt_requests" not in default
    ours = haltwise_server_cmd(8002, "bfloat16", tiny=True)
    assert ours[1:3] == ["-m", "haltwise.server.serve"] and "--tiny" in ours and "bfloat16" in ours


@pytest.mark.skipif(HAS_LLAMA_CPP, reason="llama-cpp-python is installed")
def test_without_llama_cpp_says_how_to_install(capsys):
    assert main(["bench", "peers", "--tiny"]) == 2
    out = capsys.readouterr().out
    assert out.strip() == INSTALL_HINT.strip() and "pip install" in out and "GGML_AMX_TILE=OFF" in out


@pytest.mark.slow
def test_tiny_peers_run_writes_json_and_png(tmp_path):
    pytest.importorskip("llama_cpp")
    out, png = tmp_path / "p.json", tmp_path / "p.png"
    assert main(["bench", "peers", "--tiny", "--json", str(out), "--png", str(png)]) == 0
    result = json.loads(out.read_text())
    recs = result["records"]
    pairs = {(r["system"], r["scenario"]) for r in recs}
    assert {("haltwise", "decode"), ("llama.cpp", "decode"), ("haltwise", "prefill"), ("llama.cpp", "prefill")} <= pairs
    for c in result["config"]["concurrency"]:
        for system in ("haltwise", "llama.cpp tuned", "llama.cpp default"):
            row = next(r for r in recs if (r["system"], r["scenario"]) == (system, f"server_c{c}"))
            assert row["extra"]["failed_requests"] == 0, row["extra"]["errors"]
            assert row["tokens_per_s"] > 0 and row["extra"]["ttft_p50_s"] <= row["extra"]["ttft_p95_s"]
    assert all(r["ratio"] > 0 for r in recs)
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_llama_worker_generates_exact_token_counts():
    pytest.importorskip("llama_cpp")
    from haltwise.bench.common import default_gguf
    from haltwise.bench.llama_worker import LlamaWorker

    worker = LlamaWorker(str(default_gguf()), 2, 128)
    try:
        first = worker.generate(list(range(100, 116)), 4)
        again = worker.generate(list(range(100, 116)), 4)
    finally:
        worker.close()
    for t in (first, again):
        assert (t.new_tokens, t.prompt_tokens) == (4, 16) and 0 < t.ttft_s[0] <= t.wall_s
