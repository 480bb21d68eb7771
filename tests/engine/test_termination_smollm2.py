"""Every termination reason, produced by the real SmolLM2 and reported with the right fields (SPEC §2)."""
import json

import pytest

from haltwise.engine.faults import FaultyRunner, parse_faults
from haltwise.llm import LLM
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from tests.conftest import greedy

CAPITAL = [{"role": "user", "content": "What is the capital of France? Answer in one short sentence."}]
STORY = "Once upon a time, in a small village by the sea, there lived"


def chat(llm, messages, params):
    return llm.chat(messages, params)[0].outputs[0]


def check_record(out, reason, finish_reason, layer, stop_reason=None):
    t = out.termination
    assert (t.reason.value, out.finish_reason, t.layer.value) == (reason, finish_reason, layer)
    assert out.stop_reason == stop_reason
    assert t.token_index == len(out.token_ids) - 1
    assert t.char_offset == len(out.text)
    d = t.to_dict()
    assert set(d) == {"reason", "layer", "detail", "token_index", "char_offset"} and d["detail"]


def test_eos(smollm2):
    out = chat(smollm2, CAPITAL, greedy(64))
    check_record(out, "eos", "stop", "model")
    assert "Paris" in out.text and "<|im_end|>" not in out.text


def test_max_tokens_is_exact(smollm2):
    for n in (1, 7, 33):
        out = smollm2.generate(STORY, greedy(n, ignore_eos=True))[0].outputs[0]
        assert len(out.token_ids) == n
        check_record(out, "max_tokens", "length", "engine")


def test_stop_string_spanning_two_tokens_cuts_at_its_start(smollm2):
    base = smollm2.generate(STORY, greedy(40, ignore_eos=True))[0].outputs[0]
    tok = smollm2.tokenizer
    pieces = [tok.decode([t]) for t in base.token_ids]
    # A stop string made of the end of token k and the start of token k+1 (both at least 2 chars).
    k = next(i for i in range(5, len(pieces) - 1) if len(pieces[i].strip()) >= 2 and len(pieces[i + 1].strip()) >= 2)
    stop = pieces[k][-2:] + pieces[k + 1][:2]
    start = base.text.index(stop)
    out = smollm2.generate(STORY, greedy(40, ignore_eos=True, stop=[stop]))[0].outputs[0]
    check_record(out, "stop_string", "stop", "business", stop_reason=stop)
    assert out.text == base.text[:start]
    assert out.token_ids == base.token_ids[: len(out.token_ids)] and len(out.token_ids) <= k + 2
    kept = smollm2.generate(STORY, greedy(40, ignore_eos=True, stop=[stop], include_stop_str_in_output=True))
    assert kept[0].outputs[0].text == base.text[: start + len(stop)]


def test_stop_string_in_prompt_does_not_trigger(smollm2):
    base = smollm2.generate(STORY, greedy(24, ignore_eos=True))[0].outputs[0]
    assert "village" not in base.text
    out = smollm2.generate(STORY, greedy(24, ignore_eos=True, stop=["village"]))[0].outputs[0]
    assert out.text == base.text and out.termination.reason.value == "max_tokens"


def test_stop_token_ids(smollm2):
    base = smollm2.generate(STORY, greedy(20, ignore_eos=True))[0].outputs[0]
    target = base.token_ids[5]
    first = base.token_ids.index(target)
    out = smollm2.generate(STORY, greedy(20, ignore_eos=True, stop_token_ids=[target]))[0].outputs[0]
    check_record(out, "stop_token", "stop", "business", stop_reason=target)
    assert out.token_ids == base.token_ids[: first + 1]


def test_stop_string_equal_to_special_token_stops_on_it(smollm2):
    out = chat(smollm2, CAPITAL, greedy(64, ignore_eos=True, stop=["<|im_end|>"]))
    assert out.termination.reason.value in ("stop_string", "stop_token")
    assert out.stop_reason == "<|im_end|>" and out.finish_reason == "stop"
    assert "Paris" in out.text and "<|im_end|>" not in out.text


def test_context_limit():
    """On the default path, in a 512-token window (SmolLM2's own 8192 ends the same way and costs ~90 s of
    prefill here; tests/engine/test_long_context.py serves a prompt past 8192)."""
    llm = LLM(dtype="auto", max_model_len=512, kv_cache_memory=64 * 2**20)
    window = llm.engine.max_model_len
    prompt = llm.tokenizer.encode("The sea. " * 400)[: window - 6]
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True,
                                                repetition_detection=RepetitionDetection(enabled=False)))[0]
    check_record(out.outputs[0], "context_limit", "length", "engine")
    assert window == 512 and len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == window


def test_repetition_loop(smollm2):
    messages = [{"role": "user", "content": "Write the word 'hello' one hundred times, separated by spaces."}]
    out = chat(smollm2, messages, SamplingParams(temperature=0, max_tokens=300, ignore_eos=True))
    check_record(out, "repetition", "stop", "rule")
    assert len(out.token_ids) < 300


def test_timeout_keeps_what_was_generated(smollm2):
    out = smollm2.generate(STORY, greedy(2000, ignore_eos=True, timeout=1.0))[0].outputs[0]
    check_record(out, "timeout", "length", "system")
    assert 0 < len(out.token_ids) < 2000 and out.text


def test_cancelled(smollm2):
    engine = smollm2.engine
    engine.add_request("to-cancel", smollm2.tokenizer.encode(STORY), greedy(500, ignore_eos=True))
    for _ in range(4):
        engine.step()
    engine.abort("to-cancel")
    final = [u for u in engine.step() if u.request_id == "to-cancel"][0].outputs[0]
    assert final.termination.reason.value == "cancelled" and final.termination.layer.value == "system"
    assert final.finish_reason is None
    assert engine.allocator.num_used_blocks == 0


def test_nan_logits_give_error_not_garbage(smollm2):
    engine = smollm2.engine
    real = engine.runner
    engine.runner = FaultyRunner(real, parse_faults("nan@3"))
    try:
        out = smollm2.generate(STORY, greedy(20, ignore_eos=True))[0].outputs[0]
    finally:
        engine.runner = real
    check_record(out, "error", "error", "system")
    assert len(out.token_ids) == 2


def test_min_tokens_suppresses_eos(smollm2):
    baseline = chat(smollm2, CAPITAL, greedy(40))
    assert baseline.termination.reason.value == "eos" and len(baseline.token_ids) < 20   # ends early by itself
    out = chat(smollm2, CAPITAL, greedy(40, min_tokens=20))
    assert len(out.token_ids) >= 20
    *answer, eos = baseline.token_ids                      # the eos token is the last of the output record
    assert eos in smollm2.engine.eos_token_ids
    assert out.token_ids[:len(answer)] == answer and out.token_ids[len(answer)] != eos   # same answer, eos held off


@pytest.mark.parametrize("preset", ["json"])
def test_json_preset_returns_parseable_json(smollm2, preset):
    messages = [{"role": "user", "content": 'Give a JSON object with keys "name" and "age" for a person called '
                                            'Alice who is 30. Reply with JSON only.'}]
    out = chat(smollm2, messages, greedy(120, stop_presets=[preset], ignore_eos=True))
    assert out.termination.reason.value == "stop_string"
    text = out.text
    value = json.loads(text[text.index("{"):])
    assert isinstance(value, dict)
