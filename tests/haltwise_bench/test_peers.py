"""bench peers against llama.cpp's binaries: a clear message without them; with them, a tiny end-to-end run."""
import json

import pytest

from haltwise_bench import llama_cpp
from haltwise_bench.peers import add_stream_ratios, model_eos_ids, server_request_bodies, server_table
from haltwise_bench.peers_servers import run_record
from haltwise_bench.spec_counters import SpecCounters
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


def test_the_peer_gets_a_q8_0_kv_by_default_its_chat_template_and_the_draft_model():
    """Named fault: a default that leaves llama-server's f16 KV (twice the bytes a token of haltwise's int8)."""
    assert llama_cpp.peer_options() == ["--jinja", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
    assert llama_cpp.peer_options("f16") == ["--jinja"]
    assert llama_cpp.peer_options(draft="/d.gguf")[-4:] == ["-md", "/d.gguf", "--spec-type", "draft-simple"]
    with pytest.raises(ValueError):
        llama_cpp.peer_options("q4_0")


def _summary(tok_s, stream, capped, failed=0, drafted=0, accepted=0, spec=None):
    s = {"tokens_per_s": tok_s, "stream_tok_s": stream, "ttft_p50_s": 0.1, "ttft_p95_s": 0.2, "requests": 12,
         "capped": capped, "completion_tokens": 100, "failed": failed, "errors": ["boom"] if failed else [],
         "peer_drafted": drafted, "peer_accepted": accepted}
    return s | ({"spec": spec} if spec else {})


def test_rows_report_speculation_caps_and_both_ratios_separately():
    """Named fault: acceptance taken from the last repeat only (or speculation folded away): haltwise's comes
    from its /metrics deltas summed over repeats, the peer's from its streams; a failed peer row has no ratio."""
    ours = run_record("natural", 1, "haltwise", [_summary(30, 20, 1, spec=SpecCounters(10, 5, 0, 0)),
                                                 _summary(40, 30, 2, spec=SpecCounters(30, 25, 8, 8))])
    peer = run_record("natural", 1, "llama.cpp", [_summary(20, 15, 0, drafted=4, accepted=1),
                                                  _summary(20, 15, 1, drafted=4, accepted=3)])
    assert ours["tokens_per_s"] == 35 and ours["extra"]["stream_tok_s"] == 25 and ours["extra"]["capped"] == 3
    assert ours["extra"]["acceptance"] == 0.75 and ours["extra"]["draft_model_drafted"] == 8
    assert peer["extra"]["acceptance"] == 0.5 and peer["extra"]["draft_model_drafted"] is None
    add_stream_ratios([ours, peer])
    assert ours["extra"]["stream_ratio"] == peer["extra"]["stream_ratio"] == 25 / 15
    table = server_table([ours, peer], "t")
    assert "natural" in table and " 3/24" in table and "0.75" in table
    broken = run_record("natural", 1, "llama.cpp", [_summary(20, 15, 0, failed=1)])
    add_stream_ratios([ours, broken])
    assert ours["extra"]["stream_ratio"] is None and "1 failed" in server_table([ours, broken], "t")


@needs_llama_cpp
def test_the_built_llama_server_takes_the_peer_flags_and_reports_its_drafts(tmp_path):
    """The flags are spelled as this llama-server build accepts them (it exits on an unknown one), and with
    a draft model (the model itself) it really drafts: its chat streams carry timings.draft_n > 0.
    Named fault (met in this build): -md alone loads the draft model and never drafts (draft_n absent)."""
    import asyncio

    from haltwise_bench.common import default_gguf
    from haltwise_bench.natural_chat import run_chat_load
    from haltwise_bench.servers import ServerProcess, free_port

    gguf = str(default_gguf())
    port = free_port()
    cmd = llama_cpp.llama_server_cmd(BIN, port, gguf, 2, 1, 512) + llama_cpp.peer_options("q8_0", gguf)
    with ServerProcess(cmd, port, "llama-server", "/health") as peer:
        s = asyncio.run(run_chat_load(peer.base_url, ["Count from one to twenty."], 1, 24)).summary()
    assert s["ok"] == 1 and s["peer_drafted"] > 0 and 0 <= s["peer_accepted"] <= s["peer_drafted"], s


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
    assert result["workloads"] == ["natural", "ignore_eos"] and result["peer_kv"] == "q8_0"
    for workload in result["workloads"]:
        for c in result["config"]["concurrency"]:
            for system in ("haltwise", "llama.cpp"):
                row = next(r for r in recs if (r["system"], r["scenario"]) == (system, f"{workload}_c{c}"))
                x = row["extra"]
                assert x["failed_requests"] == 0, x["errors"]
                assert x["requests"] == (12 if workload == "natural" else c) and 0 <= x["capped"] <= x["requests"]
                if workload == "ignore_eos":      # every request runs exactly to its cap
                    assert x["capped"] == x["requests"] and x["completion_tokens"] == c * 4
                assert row["tokens_per_s"] > 0 and x["ttft_p50_s"] <= x["ttft_p95_s"]
                assert "acceptance" in x and (system == "llama.cpp" or x["draft_model_drafted"] == 0)
    assert all(r["ratio"] > 0 for r in recs)
    assert png.read_bytes()[:8] == PNG_MAGIC
