"""eval-longctx on the tiny model (trained length 512): the program, its JSON and PNG, and its parts."""
import json
import math

import pytest
import torch

from haltwise_bench import passkey
from haltwise_bench.eval_longctx import _buckets
from haltwise_bench.longctx_runner import (METHODS, greedy_generate, rope_key, rope_scaling_for, set_rope,
                                           token_nll)
from haltwise.cli import main
from haltwise.models.tiny import tiny_llama
from haltwise.tokenizer.tiny import tiny_tokenizer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TEXT = ("Enter the king, with his daughters and attendants. The storm is loud upon the heath, "
        "and the fool sings of rain that raineth every day.\n") * 80


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_quick_run_writes_table_json_and_png(tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    assert main(["eval-longctx", "--tiny", "--quick", "--json", str(out_json), "--png", str(out_png)]) == 0
    captured = capsys.readouterr()
    assert "perplexity over the whole window" in captured.out and "passkey" in captured.out
    assert "[eval-longctx]" in captured.err                          # progress goes to stderr
    result = json.loads(out_json.read_text())
    assert result["trained_length"] == 512 and result["lengths"] == [512, 1024]
    assert result["methods"] == ["none", "yarn"]
    rows = {(r["method"], r["length"]): r for r in result["perplexity"]}
    assert set(rows) == {("none", 512), ("yarn", 512), ("none", 1024), ("yarn", 1024)}
    for r in rows.values():
        assert sum(b["tokens"] for b in r["buckets"]) == r["length"] - 1   # every predicted position, once
        assert math.isfinite(r["ppl"]) and r["ppl"] > 1
        mean_nll = sum(math.log(b["ppl"]) * b["tokens"] for b in r["buckets"]) / (r["length"] - 1)
        assert math.isclose(math.exp(mean_nll), r["ppl"], rel_tol=1e-4)
    # At 1x the factor is 1, so yarn's tables are no scaling's: computed once, reported as identical.
    assert rows[("yarn", 512)]["identical_to"] == "none" and rows[("yarn", 512)]["ppl"] == rows[("none", 512)]["ppl"]
    assert rows[("yarn", 1024)]["identical_to"] is None and rows[("yarn", 1024)]["ppl"] != rows[("none", 1024)]["ppl"]
    assert rows[("yarn", 1024)]["rope_scaling"] == {"rope_type": "yarn", "factor": 2.0,
                                                    "original_max_position_embeddings": 512}
    assert len(result["passkey"]) == 4
    for p in result["passkey"]:
        assert p["depth"] == 0.5 and len(p["key"]) == 5 and p["prompt_tokens"] <= p["length"] - 8
        assert p["success"] == (p["key"] in p["answer"])
    assert out_png.read_bytes()[:8] == PNG_MAGIC


def test_every_method_and_text_file(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    out_json = tmp_path / "r.json"
    code = main(["eval-longctx", "--tiny", "--text", str(text), "--lengths", "2", "--methods", ",".join(METHODS),
                 "--no-passkey", "--chunk", "300", "--bucket", "256", "--json", str(out_json)])
    assert code == 0
    result = json.loads(out_json.read_text())
    assert result["texts"] == [str(text)] and result["passkey"] == []
    at2 = {r["method"]: r["ppl"] for r in result["perplexity"]}
    assert len(set(at2.values())) == len(METHODS)                   # five different rope tables at 2x
    assert [b["start"] for b in result["perplexity"][0]["buckets"]] == [0, 256, 512, 768]


def test_text_shorter_than_the_window_is_an_error(tmp_path, capsys):
    text = tmp_path / "short.txt"
    text.write_text("too short")
    assert main(["eval-longctx", "--tiny", "--text", str(text), "--no-passkey"]) == 2
    assert "fewer than the longest window" in capsys.readouterr().err


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown method"):
        rope_scaling_for("ntk-by-parts", 2.0, 512)


def test_chunked_nll_equals_one_chunk_and_direct_log_softmax(tok):
    model = tiny_llama(tok.vocab_size)
    ids = tok.encode(TEXT, add_special_tokens=False)[:300]
    whole = token_nll(model, ids, chunk=300)
    chunked = token_nll(model, ids, chunk=37)                       # chunks that do not divide the length
    assert whole.shape == (299,)
    torch.testing.assert_close(chunked, whole, rtol=1e-4, atol=1e-4)
    # Position 0's prediction computed as a one-token sequence: nll of ids[1] given ids[0].
    assert math.isclose(float(token_nll(model, ids[:2], chunk=8)[0]), float(whole[0]), rel_tol=1e-4)


def test_set_rope_reaches_past_the_trained_window(tok):
    model = tiny_llama(tok.vocab_size)
    ids = tok.encode(TEXT, add_special_tokens=False)[:1024]
    with pytest.raises(IndexError):
        token_nll(model, ids, chunk=256)                             # tables built for 512 positions only
    set_rope(model, None, 1024)
    assert torch.isfinite(token_nll(model, ids, chunk=256)).all()
    set_rope(model, rope_scaling_for("yarn", 2.0, 512), 1024)
    assert model.model.rotary_emb.attention_scaling > 1.0           # yarn's mscale is applied


def test_rope_key_identifies_identical_tables(tok):
    config = tiny_llama(tok.vocab_size).config
    at1 = {rope_key(config, rope_scaling_for(m, 1.0, 512), 512) for m in METHODS}
    at2 = {rope_key(config, rope_scaling_for(m, 2.0, 512), 1024) for m in METHODS}
    assert len(at1) == 1 and len(at2) == len(METHODS)


def test_buckets_split_positions():
    nll = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])                   # positions 1..5
    b = _buckets(nll, 2)
    assert [(x["start"], x["end"], x["tokens"]) for x in b] == [(0, 2, 1), (2, 4, 2), (4, 6, 2)]
    assert math.isclose(b[1]["ppl"], math.exp(2.5))


@pytest.mark.parametrize("depth", [0.1, 0.5, 0.9])
def test_passkey_prompt_fits_and_hides_the_key_at_depth(tok, depth):
    ids = tok.encode("".join(f"Line {i} of the play.\n" for i in range(1000)), add_special_tokens=False)
    p = passkey.build_prompt(tok, ids, "12345", depth, 2000)
    assert 1990 <= len(p.prompt_ids) <= 2000
    text = tok.decode(p.prompt_ids, skip_special_tokens=False)
    assert text.startswith("<|im_start|>user\n")
    assert text.endswith("What is the pass key?<|im_end|>\n<|im_start|>assistant\n")
    assert text.count("The pass key is 12345. Remember it.") == 1
    assert abs(p.needle_token / len(p.prompt_ids) - depth) < 0.1


def test_passkey_found_and_greedy_generate_stops_at_eos(tok):
    assert passkey.found("12345", " The pass key is 12345.") and not passkey.found("12345", "1234 5")
    model = tiny_llama(tok.vocab_size)
    prompt = tok.encode(TEXT, add_special_tokens=False)[:100]
    free = greedy_generate(model, prompt, 6, chunk=32)
    assert len(free) == 6
    stopped = greedy_generate(model, prompt, 6, chunk=32, eos_ids=frozenset({free[2]}))
    assert stopped == free[:free.index(free[2]) + 1]
