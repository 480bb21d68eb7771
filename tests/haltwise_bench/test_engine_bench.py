"""bench engine on the tiny model: runs end to end, well-formed JSON and PNG; the transformers twin is exact."""
import json

import torch

from haltwise_bench.common import token_prompts
from haltwise_bench.engine_bench import TINY, engine_label, run_order
from haltwise_bench.haltwise_runner import HaltwiseRunner, fixed_length_params, sibling_engine
from haltwise_bench.hf_runner import HFRunner, hf_twin_of
from haltwise.cli import main
from haltwise.llm import LLM

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RECORD_KEYS = {"system", "scenario", "tokens_per_s", "ttft_s", "ratio", "repeats", "extra"}


def test_tiny_engine_bench_writes_json_and_png(tmp_path, capsys):
    out, png = tmp_path / "b.json", tmp_path / "b.png"
    assert main(["bench", "engine", "--tiny", "--repeats", "2", "--json", str(out), "--png", str(png)]) == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "engine" and result["repeats"] == 2
    recs = result["records"]
    assert all(set(r) == RECORD_KEYS for r in recs)
    pairs = {(r["system"], r["scenario"]) for r in recs}
    for scenario in ("throughput", "single_decode", "prefill"):
        assert {("haltwise", scenario), ("transformers", scenario)} <= pairs
    assert {("haltwise chunked", "chunked_prefill"), ("haltwise unchunked", "chunked_prefill")} <= pairs
    for r in recs:
        assert r["repeats"] == 2 and r["ttft_s"] > 0
        if r["scenario"] != "chunked_prefill":
            assert r["tokens_per_s"] > 0 and r["ratio"] > 0
    thr = [r for r in recs if r["scenario"] == "throughput"]
    assert all(r["extra"]["peak_rss_mib"] > 0 and r["extra"]["new_tokens"] == TINY.batch * TINY.batch_tokens
               for r in thr)
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "throughput" in capsys.readouterr().out
    # the engine as resolved is recorded and labels each row; each ratio says which way it points
    assert result["engine_config"]["dtype"] == "float32" and result["engine_config"]["enable_prefix_caching"] is False
    assert all(r["extra"]["engine"].startswith("dtype float32") and r["extra"]["ratio_meaning"] for r in recs)
    chunked = [r for r in recs if r["scenario"] == "chunked_prefill"]
    assert all("lower is better" in r["extra"]["ratio_meaning"] for r in chunked)


def test_label_says_what_the_engine_runs():
    """bench engine rows name the resolved engine: auto's plan formats are not float32's exact path."""
    from haltwise.config import EngineConfig

    assert engine_label(EngineConfig(dtype="auto")).startswith("dtype auto: float32 activations and KV, each linear")
    assert engine_label(EngineConfig(dtype="float32")) == \
        "dtype float32: every linear, activation and the KV cache in float32"


def test_order_alternates_even_with_one_repeat():
    # scenario index + repeat decides who goes first, so one repeat still alternates across scenarios
    assert [run_order(["h", "t"], turn)[0] for turn in range(4)] == ["h", "t", "h", "t"]


def test_transformers_twin_generates_the_same_greedy_tokens():
    llm = LLM(tiny=True)
    twin = hf_twin_of(llm.engine.runner.model, "float32")
    prompt = token_prompts(llm.tokenizer, 1, 12)[0]
    ours = llm.generate([prompt], fixed_length_params(10))[0].outputs[0].token_ids
    with torch.inference_mode():
        theirs = twin.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                               max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)
    assert ours == theirs[0, len(prompt):].tolist()


def test_runners_produce_exact_token_counts():
    llm = LLM(tiny=True)
    prompts = token_prompts(llm.tokenizer, 3, 8)
    assert len({tuple(p) for p in prompts}) == 3 and all(len(p) == 8 for p in prompts)
    ours = HaltwiseRunner(llm.engine).generate(prompts, 5)
    theirs = HFRunner(hf_twin_of(llm.engine.runner.model, "float32"), 0).generate([prompts[0], prompts[1][:5]], 5)
    assert (ours.new_tokens, ours.prompt_tokens, len(ours.ttft_s)) == (15, 24, 3)
    assert (theirs.new_tokens, theirs.prompt_tokens) == (10, 13)  # left padding adds no tokens
    assert 0 < theirs.ttft_s[0] <= theirs.wall_s


def test_short_requests_behind_a_long_prompt_all_get_a_first_token():
    llm = LLM(tiny=True, max_num_batched_tokens=32, enable_prefix_caching=False)
    long_prompt = token_prompts(llm.tokenizer, 1, 200)[0]
    shorts = token_prompts(llm.tokenizer, 3, 6, offset_tokens=200)
    for engine in (llm.engine, sibling_engine(llm.engine, enable_chunked_prefill=False)):
        ttfts = HaltwiseRunner(engine).ttft_behind_long_prompt(long_prompt, shorts, 2)
        assert len(ttfts) == 3 and all(t > 0 for t in ttfts)
        assert engine.stats().kv_blocks_used == 0 and not engine.has_unfinished()  # every request drained
    assert not sibling_engine(llm.engine, enable_chunked_prefill=False).config.enable_chunked_prefill
