"""The engine over the tiny random model: batching, preemption, prefix cache, aborts, deadlines, faults."""
import time

import pytest
import torch

from dataclasses import replace

from haltwise_bench.hf_runner import hf_twin_of
from haltwise.config import EngineConfig
from haltwise.engine.model_runner import ModelRunner
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.engine.factory import build_engine
from haltwise.errors import ContextLengthExceeded, InvalidRequest, Overloaded, RequestTooLarge
from haltwise.llm import LLM
from tests.conftest import greedy

PROMPTS = ["Hello world", "def generate(prompt):", "Once upon a time there was", "1, 2, 3, 4,",
           "Café, naïve, résumé", "for i in range(10):", "The little model", "{\"role\": \"user\""]


def run_all(engine, prompts, params):
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}", engine.tokenizer.encode(p), params)
    final = {}
    while engine.has_unfinished():
        for update in engine.step():
            if update.finished:
                final[update.request_id] = update
    return [final[f"r{i}"] for i in range(len(prompts))]


def tiny_engine(**config):
    return build_engine(engine_config=EngineConfig(**{"kv_cache_memory": 4 * 2**20, **config}), tiny=True)


# Seeded sampling at temperature 1 with logprobs: sequences vary (the tiny random model repeats one id
# under greedy, so token equality alone passes even with a KV cache that forgets every step), and each
# token's logprob is checked against a cache-free oracle: transformers on the same weights, one forward.
SAMPLED = SamplingParams(temperature=1.0, seed=11, max_tokens=24, logprobs=0,
                         repetition_detection=RepetitionDetection(enabled=False))


def oracle_logprobs(engine, out) -> list[float]:
    """log p(token | prompt + earlier tokens) of each output token, from transformers' float32 twin."""
    twin = hf_twin_of(engine.runner.model, "float32")
    prompt, tokens = list(out.prompt_token_ids), list(out.outputs[0].token_ids)
    with torch.inference_mode():
        logits = twin(torch.tensor([prompt + tokens])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return [logp[len(prompt) - 1 + i, t].item() for i, t in enumerate(tokens)]


def assert_matches_oracle(engine, outs, tol=1e-3) -> None:
    for out in outs:
        got = [lp.logprob for lp in out.outputs[0].logprobs]
        assert len(got) == len(out.outputs[0].token_ids) > 0
        assert got == pytest.approx(oracle_logprobs(engine, out), abs=tol)


def test_batched_equals_single_requests_and_the_oracle():
    engine = tiny_engine()
    batched = run_all(engine, PROMPTS, SAMPLED)
    assert all(len(set(o.outputs[0].token_ids)) > 4 for o in batched)  # not one repeated id
    for i, prompt in enumerate(PROMPTS):
        alone = run_all(tiny_engine(), [prompt], SAMPLED)[0]
        assert batched[i].outputs[0].token_ids == alone.outputs[0].token_ids
    assert_matches_oracle(engine, batched)
    greedy_batched = run_all(tiny_engine(), PROMPTS, greedy(24))
    for i, prompt in enumerate(PROMPTS):
        assert greedy_batched[i].outputs[0].token_ids == run_all(tiny_engine(), [prompt], greedy(24))[0].outputs[0].token_ids


def test_tiny_pool_preempts_and_still_matches_large_pool():
    params = replace(SAMPLED, max_tokens=40)
    large = run_all(tiny_engine(), PROMPTS, params)
    # 12 blocks of 16 tokens cannot hold 8 sequences of ~50 tokens at once: preemption must happen.
    small_engine = tiny_engine(kv_cache_memory=12 * 16 * 512, max_num_batched_tokens=64)
    small = run_all(small_engine, PROMPTS, params)
    assert small_engine.scheduler.num_preemptions > 0
    for a, b in zip(large, small):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.outputs[0].text == b.outputs[0].text
    assert_matches_oracle(small_engine, small)
    assert small_engine.allocator.num_used_blocks == 0


def test_chunked_prefill_matches_unchunked():
    long_prompt = "The quick brown fox jumps over the lazy dog. " * 20
    params = replace(SAMPLED, max_tokens=16)
    engine = tiny_engine(max_num_batched_tokens=32)
    chunked = run_all(engine, [long_prompt, "Hi"], params)
    whole = run_all(tiny_engine(enable_chunked_prefill=False, max_num_batched_tokens=2048), [long_prompt, "Hi"],
                    params)
    assert [o.outputs[0].token_ids for o in chunked] == [o.outputs[0].token_ids for o in whole]
    assert_matches_oracle(engine, chunked)


def test_oracle_catches_a_kv_cache_zeroed_each_step(monkeypatch):
    """Named fault: the KV cache is wiped after every step. Greedy token equality (the old check) still
    holds -- batched and single are broken the same way -- but the logprobs leave the oracle."""
    real = ModelRunner.execute

    def forgetful(self, rows):
        logits = real(self, rows)
        for k, v in self.kv_caches:
            k.zero_()
            v.zero_()
        return logits

    monkeypatch.setattr(ModelRunner, "execute", forgetful)
    batched = run_all(tiny_engine(), PROMPTS[:3], greedy(24))
    for i, prompt in enumerate(PROMPTS[:3]):
        assert batched[i].outputs[0].token_ids == run_all(tiny_engine(), [prompt], greedy(24))[0].outputs[0].token_ids
    engine = tiny_engine()
    with pytest.raises(AssertionError):
        assert_matches_oracle(engine, run_all(engine, PROMPTS[:3], SAMPLED))


def test_prefix_cache_hit_for_shared_system_prompt():
    llm = LLM(tiny=True, kv_cache_memory=4 * 2**20)
    system = {"role": "system", "content": "You are a careful assistant. " * 8}
    params = replace(SAMPLED, max_tokens=8)
    llm.chat([system, {"role": "user", "content": "first question"}], params)
    before = llm.engine.allocator.prefix_cache_hits
    second = llm.chat([system, {"role": "user", "content": "second"}], params)[0]
    assert llm.engine.allocator.prefix_cache_hits - before >= 32
    assert second.num_cached_tokens >= 32
    # the cached blocks give what a cache-off run computes
    off = LLM(tiny=True, kv_cache_memory=4 * 2**20, enable_prefix_caching=False)
    fresh = off.chat([system, {"role": "user", "content": "second"}], params)[0]
    assert fresh.num_cached_tokens == 0
    assert second.outputs[0].token_ids == fresh.outputs[0].token_ids
    assert [x.logprob for x in second.outputs[0].logprobs] == pytest.approx(
        [x.logprob for x in fresh.outputs[0].logprobs], abs=1e-4)


def test_kv_budget_printout_equals_formula():
    engine = tiny_engine(kv_cache_memory=3 * 2**20, block_size=16)
    c = engine.model_config
    per_token = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 4
    assert engine.budget.bytes_per_token == per_token
    assert engine.budget.num_blocks == 3 * 2**20 // (per_token * 16)
    k, v = engine.runner.kv_caches[0]
    assert k.shape == (engine.budget.num_blocks, 16, c.num_kv_heads, c.head_dim)
    allocated = sum(t.numel() * t.element_size() for pair in engine.runner.kv_caches for t in pair)
    assert allocated == engine.budget.num_bytes
    assert f"{engine.budget.num_blocks} blocks" in engine.describe()


def test_validation_errors_name_numbers():
    engine = tiny_engine()
    with pytest.raises(InvalidRequest):
        engine.add_request("a", [engine.model_config.vocab_size], greedy())
    with pytest.raises(ContextLengthExceeded, match="512"):
        engine.add_request("b", [5] * 600, greedy())
    with pytest.raises(ContextLengthExceeded, match="500 in the prompt"):
        engine.add_request("c", [5] * 500, greedy(100))
    assert not engine.requests and engine.allocator.num_used_blocks == 0


def test_truncate_prompt_tokens_is_explicit_and_reported():
    engine = tiny_engine()
    out = run_all(engine, ["word " * 100], greedy(4, truncate_prompt_tokens=10))[0]
    assert len(out.prompt_token_ids) == 10
    assert out.num_truncated_prompt_tokens > 0


def test_admission_too_large_and_queue_full():
    engine = tiny_engine(kv_cache_memory=4 * 16 * 512, max_queue=2)
    with pytest.raises(RequestTooLarge):
        engine.add_request("big", [5] * 100, greedy(100))
    engine.add_request("a", [5] * 10, greedy(8))
    engine.add_request("b", [5] * 10, greedy(8))
    with pytest.raises(Overloaded) as e:
        engine.add_request("c", [5] * 10, greedy(8))
    assert e.value.retry_after and e.value.retry_after > 0


def test_abort_frees_blocks_and_reports_cancelled():
    engine = tiny_engine()
    engine.add_request("x", engine.tokenizer.encode("Hello " * 10), greedy(100))   # 2+ blocks
    engine.add_request("y", engine.tokenizer.encode("World"), greedy(5))          # 1 block
    engine.step()
    engine.step()
    blocks = {s.request_id: len(s.block_table) for s in engine.scheduler.running}
    assert engine.allocator.num_used_blocks == blocks["x"] + blocks["y"] and blocks["x"] >= 2
    engine.abort("x")
    updates = {u.request_id: u for u in engine.step()}
    assert updates["x"].outputs[0].termination.reason.value == "cancelled"
    assert engine.allocator.num_used_blocks == blocks["y"]  # exactly x's blocks are back, at once
    while engine.has_unfinished():
        engine.step()
    assert engine.allocator.num_used_blocks == 0


def test_deadline_ends_with_timeout_and_keeps_text():
    engine = tiny_engine()
    engine.add_request("t", engine.tokenizer.encode("Hello"), greedy(400, timeout=0.05))
    final = None
    while engine.has_unfinished():
        for u in engine.step():
            final = u
        time.sleep(0.005)
    out = final.outputs[0]
    assert out.termination.reason.value == "timeout" and out.finish_reason == "length"
    assert 0 < len(out.token_ids) < 400
    assert out.termination.char_offset == len(out.text)
    assert engine.allocator.num_used_blocks == 0


def test_nan_logits_end_request_with_error(monkeypatch):
    monkeypatch.setenv("HALTWISE_FAULTS", "nan@3")
    engine = tiny_engine()
    out = run_all(engine, ["Hello"], greedy(20))[0].outputs[0]
    assert out.termination.reason.value == "error"
    assert len(out.token_ids) == 2           # steps 1-2 produced tokens; step 3's garbage never appears
    assert engine.allocator.num_used_blocks == 0


def test_step_failure_ends_only_its_sequences(monkeypatch):
    monkeypatch.setenv("HALTWISE_FAULTS", "raise@2")
    engine = tiny_engine(max_num_seqs=1)  # the second request waits: it is in flight, not in step 2
    first, waiting = (o.outputs[0] for o in run_all(engine, ["Hello", "World"], greedy(5)))
    assert first.termination.reason.value == "error"
    assert waiting.termination.reason.value == "max_tokens" and len(waiting.token_ids) == 5  # it survived
    second = run_all(engine, ["Hello"], greedy(5))[0].outputs[0]   # the engine keeps serving
    assert second.termination.reason.value == "max_tokens"
    assert engine.allocator.num_used_blocks == 0


def test_seeded_sampling_is_reproducible():
    from haltwise.sampling_params import SamplingParams

    params = SamplingParams(temperature=1.0, top_p=0.9, seed=7, max_tokens=12)
    a = run_all(tiny_engine(), ["Hello"], params)[0].outputs[0].token_ids
    b = run_all(tiny_engine(), ["Hello", "Other prompt"], params)[0].outputs[0].token_ids
    assert a == b


def test_bfloat16_engine_keeps_kv_in_bfloat16():
    engine = tiny_engine(dtype="bfloat16")
    out = run_all(engine, ["Hello"], greedy(8))[0].outputs[0]
    assert len(out.token_ids) == 8
    assert engine.runner.kv_caches[0][0].dtype == torch.bfloat16
    assert engine.budget.bytes_per_token == engine.model_config.kv_bytes_per_token("bfloat16")
