"""bench moe: llama-batched-bench's figures parsed, a layer's share computed from two depths, and a tiny-shape run
of the whole program against llama.cpp (slow; skipped, saying why, without the peer or the Qwen tokenizer)."""
import json

import pytest

from haltwise.cli import main
from haltwise_bench import llama_cpp, moe_gguf
from haltwise_bench.moe_bench import PEER_BINARIES, per_layer_records

BIN = llama_cpp.bin_dir()
MISSING = llama_cpp.missing_binaries(BIN, PEER_BINARIES)
TINY_SHAPE = ["--hidden", "256", "--heads", "4", "--kv-heads", "2", "--head-dim", "64", "--experts", "16",
              "--active", "4", "--expert-ffn", "256"]


def _tokenizer_missing() -> str | None:
    try:
        moe_gguf.tokenizer_source()
    except Exception as e:  # the catalog's error says how to install it
        return f"{moe_gguf.TOKENIZER_MODEL} (the Qwen tokenizer source) not installed: {e}"
    return None


def test_batched_bench_jsonl_is_parsed_to_the_decode_rate_per_sequence_count():
    """Named fault: reading speed_pp (prefill) or speed (prefill + decode) instead of speed_tg."""
    lines = ['main: n_kv_max = 2048', json.dumps({"pp": 16, "tg": 8, "pl": 1, "speed_pp": 60.5, "speed_tg": 1.25,
                                                   "speed": 3.5}),
             json.dumps({"pp": 16, "tg": 8, "pl": 8, "speed_pp": 50.2, "speed_tg": 1.75, "speed": 4.9})]
    assert llama_cpp.parse_batched_bench("\n".join(lines)) == {1: 1.25, 8: 1.75}


def test_a_layers_share_is_the_step_difference_between_depths():
    """Named fault: a step's time taken per token (1000 / tok/s) at n streams, or divided by all layers."""
    rates = {("haltwise", 4, 1): [10.0], ("haltwise", 1, 1): [20.0],       # steps 100 and 50 ms: 50 / 3 layers
             ("llama.cpp", 4, 1): [5.0], ("llama.cpp", 1, 1): [10.0],      # 200 and 100 ms: 100 / 3
             ("haltwise", 4, 8): [40.0, 80.0, 20.0], ("haltwise", 1, 8): [80.0],   # median 40: 200 ms, base 100
             ("llama.cpp", 4, 8): [20.0], ("llama.cpp", 1, 8): [100.0]}    # 400 and 80 ms
    rows = {(r["system"], r["streams"]): r for r in per_layer_records(rates, 4, 1, (1, 8))}
    assert rows[("haltwise", 1)]["layer_ms"] == pytest.approx(50 / 3)
    assert rows[("haltwise", 1)]["ratio"] == pytest.approx(2.0) == rows[("llama.cpp", 1)]["ratio"]
    assert rows[("haltwise", 8)]["step_ms"] == pytest.approx(200.0)
    assert rows[("haltwise", 8)]["layer_ms"] == pytest.approx(100 / 3)
    assert rows[("llama.cpp", 8)]["ratio"] == pytest.approx((320 / 3) / (100 / 3))
    assert rows[("llama.cpp", 8)]["step_ratio"] == pytest.approx(2.0)


def test_without_a_base_file_a_layer_is_the_whole_step_over_the_layers():
    rates = {("haltwise", 4, 1): [10.0], ("llama.cpp", 4, 1): [5.0]}
    rows = per_layer_records(rates, 4, 0, (1,))
    assert rows[0]["layer_ms"] == pytest.approx(25.0) and rows[0]["base_step_ms"] is None


def test_without_binaries_says_how_to_build_them(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HALTWISE_LLAMA_CPP_BIN", str(tmp_path))
    assert main(["bench", "moe"]) == 2
    out = capsys.readouterr().out
    assert "make bench-setup" in out and "llama-quantize" in out and "llama-batched-bench" in out


@pytest.mark.slow
@pytest.mark.skipif(bool(MISSING), reason=f"llama.cpp's {', '.join(MISSING)} not built in {BIN}: make bench-setup")
def test_tiny_shapes_run_both_systems_on_the_same_quantized_file(tmp_path, capsys, monkeypatch):
    """The whole program at a shrunken shape: file built by the gguf package + llama-quantize, both systems timed
    at 1 and 2 streams on 2- and 1-layer files. Named fault: llama-quantize's type argument Q8_0 instead of
    Q4_K_M (the experts are then not the k-quants the bench claims)."""
    if reason := _tokenizer_missing():
        pytest.skip(reason)
    monkeypatch.setattr(moe_gguf, "CACHE", tmp_path / "moebench")      # built here, by this code
    out = tmp_path / "moe.json"
    assert main(["bench", "moe", "--layers", "2", "--base-layers", "1", "--streams", "1", "2", "--decode-tokens", "3",
                 "--prompt-tokens", "8", "--json", str(out), *TINY_SHAPE]) == 0
    assert "llama.cpp" in capsys.readouterr().out
    result = json.loads(out.read_text())
    rows = {(r["system"], r["streams"]): r for r in result["records"]}
    assert set(rows) == {(s, n) for s in ("haltwise", "llama.cpp") for n in (1, 2)}
    for r in rows.values():
        assert r["tokens_per_s"] > 0 and r["step_ms"] > 0 and r["base_step_ms"] > 0
        assert set(r["runs"]) == {"1", "2"}
    types = result["tensor_types"]
    assert {types[f"blk.{i}.ffn_{p}_exps.weight"] for i in (0, 1) for p in ("gate", "up")} == {"Q4_K"}
    assert types["blk.1.ffn_down_exps.weight"] == "Q6_K"             # llama.cpp's Q4_K_M: more bits on the last
    assert types["blk.0.ffn_gate_inp.weight"] == "F32" and types["output.weight"] == "Q6_K"
    assert result["shape"]["experts"] == 16 and result["layers"] == 2


def test_haltwise_decodes_one_token_a_step_as_the_peer(monkeypatch):
    """Prompt lookup is on by default wherever every step is batch invariant (MoE included since the native stack
    runs it): a random model's repetitive output then has drafts accepted and its tok/s counts several tokens a
    step, which llama-batched-bench never does. Named fault: the engine built with the default options."""
    import argparse
    from pathlib import Path

    from haltwise_bench.moe_bench import haltwise_rates

    seen = {}

    class Built(Exception):
        pass

    def engine(path, **options):
        seen.update(options)
        raise Built

    monkeypatch.setattr("haltwise.llm.LLM", engine)
    with pytest.raises(Built):
        haltwise_rates(Path("moe.gguf"), (1,), argparse.Namespace(threads=2, prompt_tokens=8, decode_tokens=4), {})
    assert seen["speculative_tokens"] == 0 and seen["num_threads"] == 2
