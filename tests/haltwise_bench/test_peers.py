"""bench peers against llama.cpp's binaries: a clear message without them; with them, a tiny end-to-end run."""
import json

import pytest

from haltwise_bench import llama_cpp
from haltwise_bench.peers import model_eos_ids, server_request_bodies
from haltwise_bench.servers import haltwise_server_cmd
from haltwise.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BIN = llama_cpp.bin_dir()
MISSING = llama_cpp.missing_binaries(BIN)
needs_llama_cpp = pytest.mark.skipif(bool(MISSING), reason=f"llama.cpp binaries not built ({', '.join(MISSING)} "
                                                           f"missing in {BIN}; run `make bench-setup`)")


def test_commands_bind_loopback_and_size_llama_server_slots(tmp_path):
    ours = haltwise_server_cmd(8002, "bfloat16", tiny=True)
    assert ours[1:4] == ["-m", "haltwise.cli", "serve"] and "--tiny" in ours and "bfloat16" in ours
    assert ours[ours.index("--host") + 1] == "127.0.0.1"
    peer = llama_cpp.llama_server_cmd(tmp_path, 8001, "/m.gguf", 2, 8, 400)
    assert peer[0] == str(tmp_path / "llama-server")
    assert peer[peer.index("-np") + 1] == "8" and peer[peer.index("-c") + 1] == "3200"
    assert peer[peer.index("--host") + 1] == "127.0.0.1" and peer[peer.index("-t") + 1] == "2"


def test_bin_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HALTWISE_LLAMA_CPP_BIN", str(tmp_path))
    assert llama_cpp.bin_dir() == tmp_path and llama_cpp.bin_dir("/x") == llama_cpp.Path("/x")
    assert llama_cpp.missing_binaries(tmp_path) == ["llama-server", "llama-bench"]


def test_without_binaries_says_how_to_build_them(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HALTWISE_LLAMA_CPP_BIN", str(tmp_path))
    assert main(["bench", "peers", "--tiny"]) == 2
    out = capsys.readouterr().out
    assert "make bench-setup" in out and str(tmp_path) in out and "llama-server" in out


def test_llama_bench_json_is_parsed():
    text = json.dumps([{"n_prompt": 512, "n_gen": 0, "avg_ts": 1234.5}, {"n_prompt": 0, "n_gen": 128, "avg_ts": 99.0}])
    assert llama_cpp.parse_llama_bench(text) == {"pp512": 1234.5, "tg128": 99.0}


def test_requests_ask_both_servers_for_exactly_max_tokens():
    from haltwise_bench.common import default_gguf

    eos = model_eos_ids(str(default_gguf()))
    assert eos and all(isinstance(t, int) for t in eos)
    bodies = server_request_bodies(eos)
    assert bodies["haltwise"] == {"ignore_eos": True, "repetition_detection": {"enabled": False}}
    assert bodies["llama.cpp"]["ignore_eos"] and set(bodies["llama.cpp"]["logit_bias"]) == {str(t) for t in eos}


@needs_llama_cpp
def test_llama_bench_reports_prefill_and_decode():
    from haltwise_bench.common import default_gguf

    figures = llama_cpp.llama_bench(BIN, default_gguf(), 2, 16, 4)
    assert set(figures) == {"pp16", "tg4"} and all(v > 0 for v in figures.values())


@pytest.mark.slow
@needs_llama_cpp
def test_tiny_peers_run_writes_json_and_png(tmp_path):
    out, png = tmp_path / "p.json", tmp_path / "p.png"
    assert main(["bench", "peers", "--tiny", "--threads", "1", "--json", str(out), "--png", str(png)]) == 0
    result = json.loads(out.read_text())
    recs = result["records"]
    pairs = {(r["system"], r["scenario"]) for r in recs}
    assert {("haltwise", "decode"), ("llama.cpp", "decode"), ("haltwise", "prefill"), ("llama.cpp", "prefill")} <= pairs
    for c in result["config"]["concurrency"]:
        for system in ("haltwise", "llama.cpp"):
            row = next(r for r in recs if (r["system"], r["scenario"]) == (system, f"server_c{c}"))
            assert row["extra"]["failed_requests"] == 0, row["extra"]["errors"]
            assert row["extra"]["completion_tokens"] == row["extra"]["expected_tokens"]
            assert row["tokens_per_s"] > 0 and row["extra"]["ttft_p50_s"] <= row["extra"]["ttft_p95_s"]
    assert all(r["ratio"] > 0 for r in recs)
    assert png.read_bytes()[:8] == PNG_MAGIC
