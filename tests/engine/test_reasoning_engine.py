"""Reasoning sections in the engine, on the scripted tiny qwen3 model with the real Qwen3 template.

Expected texts come from the script (tiny_qwen3.SCRIPTS) and the tokenizer at run time: reasoning and
answer are split at the tags, the tags are in neither, and every answer-side rule (stop strings, stop
token ids, grammars, loop detectors) leaves the reasoning alone, while the budget and a reasoning loop
close the section (the engine forces </think>) and the answer follows.
"""
from __future__ import annotations

import pytest

from haltwise.engine.engine import LLMEngine
from haltwise.models.tiny import tiny_llama
from haltwise.config import EngineConfig
from haltwise.outputs import RequestOutput
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.termination import Reason
from haltwise.tokenizer.tiny import tiny_tokenizer
from tests.engine.tiny_qwen3 import SCRIPTS, tiny_qwen3_engine


@pytest.fixture(scope="module")
def engine() -> LLMEngine:
    return tiny_qwen3_engine()


def run(engine: LLMEngine, cue: str, template_kwargs: dict | None = None,
        **params) -> tuple[RequestOutput, list[RequestOutput]]:
    """(final output, every update) of one chat turn whose user message is `cue`."""
    tok = engine.tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": cue}], **(template_kwargs or {})),
                        add_special_tokens=False)
    rid = f"r{len(engine.requests)}-{cue}-{sorted(params.items())!r}"
    engine.add_request(rid, prompt, SamplingParams(**{"max_tokens": 200, "temperature": 0.0,
                                                      "split_reasoning": True, **params}))
    updates = []
    while engine.has_unfinished():
        updates += [u for u in engine.step() if u.request_id == rid]
    assert updates[-1].finished
    return updates[-1], updates


def tag_ids(engine: LLMEngine) -> tuple[int, int]:
    return engine.reasoning_tags.open_id, engine.reasoning_tags.close_id


def test_reasoning_and_answer_are_split_and_the_tags_are_in_neither(engine) -> None:
    out, updates = run(engine, "split")
    o = out.outputs[0]
    open_id, close_id = tag_ids(engine)
    script = SCRIPTS["split"]
    assert (o.reasoning_text, o.text) == (script.reasoning, script.answer)
    assert o.token_ids[0] == open_id and o.token_ids.count(close_id) == 1
    close_at = o.token_ids.index(close_id)
    assert o.num_reasoning_tokens == close_at - 1
    assert engine.tokenizer.decode(o.token_ids[1:close_at]) == o.reasoning_text
    assert o.termination.reason is Reason.EOS and o.termination.detail.startswith("eos token")
    assert o.termination.char_offset == len(o.text)
    # streamed: the deltas add up to the final texts, reasoning entirely before any answer text
    assert "".join(u.outputs[0].delta_reasoning_text for u in updates) == o.reasoning_text
    assert "".join(u.outputs[0].delta_text for u in updates) == o.text
    first_answer = next(i for i, u in enumerate(updates) if u.outputs[0].delta_text)
    assert not any(u.outputs[0].delta_reasoning_text for u in updates[first_answer:])


@pytest.mark.parametrize("budget", [0, 1, 5])
def test_budget_closes_the_section_after_exactly_n_tokens_and_the_answer_follows(engine, budget) -> None:
    out, _ = run(engine, "long", max_reasoning_tokens=budget)
    o = out.outputs[0]
    open_id, close_id = tag_ids(engine)
    assert o.token_ids[0] == open_id and o.token_ids[budget + 1] == close_id      # forced right after N
    assert o.num_reasoning_tokens == budget
    assert o.reasoning_text == engine.tokenizer.decode(o.token_ids[1:budget + 1])
    assert SCRIPTS["long"].reasoning.startswith(o.reasoning_text) and o.reasoning_text != SCRIPTS["long"].reasoning
    assert o.text == SCRIPTS["long"].answer                                       # the answer continues
    t = o.termination
    assert t.reason is Reason.EOS    # what ended the answer; the detail says the budget cut the reasoning
    assert f"the reasoning budget of {budget} tokens was spent; the answer followed" in t.detail


@pytest.mark.parametrize("boundary", ["prefix", "word"])
def test_stop_string_inside_reasoning_is_ignored_but_ends_the_answer(engine, boundary) -> None:
    out, updates = run(engine, "stop", stop=["STOP"], stop_boundary=boundary)
    o = out.outputs[0]
    script = SCRIPTS["stop"]
    assert "STOP" in script.reasoning and o.reasoning_text == script.reasoning     # not cut
    assert o.text == script.answer[:script.answer.index("STOP")]                   # cut in the answer
    assert o.termination.reason is Reason.STOP_STRING and o.stop_reason == "STOP"
    assert o.termination.char_offset == len(o.text)
    assert "".join(u.outputs[0].delta_text for u in updates) == o.text


def test_stop_presets_act_on_the_answer_only(engine) -> None:
    out, _ = run(engine, "paragraph", stop_presets=["paragraph"])
    o = out.outputs[0]
    assert o.reasoning_text == SCRIPTS["paragraph"].reasoning and "\n\n" in o.reasoning_text
    assert o.text == "One line." and o.termination.reason is Reason.STOP_STRING and o.stop_reason == "paragraph"


def test_stop_token_ids_act_on_the_answer_only(engine) -> None:
    tok = engine.tokenizer
    reasoning_ids = tok.encode(SCRIPTS["split"].reasoning, add_special_tokens=False)
    out, _ = run(engine, "split", stop_token_ids=[reasoning_ids[2]])
    o = out.outputs[0]
    assert o.reasoning_text == SCRIPTS["split"].reasoning
    first_answer = tok.encode(SCRIPTS["split"].answer, add_special_tokens=False)[0]
    out, _ = run(engine, "split", stop_token_ids=[first_answer])
    assert out.outputs[0].termination.reason is Reason.STOP_TOKEN and out.outputs[0].text == ""


def test_grammar_applies_to_the_answer_only(engine) -> None:
    out, _ = run(engine, "grammar", structured_outputs={"choice": ["yes", "no"]})
    o = out.outputs[0]
    assert o.reasoning_text == SCRIPTS["grammar"].reasoning        # free text the grammar would never allow
    assert o.text in ("yes", "no") and o.termination.reason is Reason.GRAMMAR


def test_a_loop_inside_reasoning_ends_the_reasoning_not_the_request(engine) -> None:
    out, _ = run(engine, "loop")
    o = out.outputs[0]
    assert SCRIPTS["loop"].reasoning.startswith(o.reasoning_text) and len(o.reasoning_text) < len(SCRIPTS["loop"].reasoning)
    assert o.text == SCRIPTS["loop"].answer and o.termination.reason is Reason.EOS
    assert "a loop inside the reasoning (period" in o.termination.detail
    off, _ = run(engine, "loop", repetition_detection=RepetitionDetection(enabled=False))
    assert off.outputs[0].reasoning_text == SCRIPTS["loop"].reasoning     # detectors off: the model closes it


def test_eos_inside_reasoning_ends_the_request(engine) -> None:
    out, _ = run(engine, "quit")
    o = out.outputs[0]
    assert (o.reasoning_text, o.text) == (SCRIPTS["quit"].reasoning, "")
    assert o.termination.reason is Reason.EOS and "inside the reasoning" in o.termination.detail
    n = len(o.token_ids) - 2                          # <think>, reasoning ..., <|im_end|>
    assert o.num_reasoning_tokens == n and o.token_ids[-1] == engine.tokenizer.token_to_id("<|im_end|>")
    assert o.termination.detail.endswith(f"the request ended inside the reasoning ({n} reasoning tokens, no answer)")


def test_max_tokens_counts_reasoning_and_answer(engine) -> None:
    out, _ = run(engine, "split", max_tokens=4)
    o = out.outputs[0]
    assert len(o.token_ids) == 4 and o.text == "" and o.termination.reason is Reason.MAX_TOKENS
    assert o.reasoning_text == engine.tokenizer.decode(o.token_ids[1:])
    assert "the request ended inside the reasoning (3 reasoning tokens, no answer)" in o.termination.detail


def test_enable_thinking_false_leaves_only_an_answer(engine) -> None:
    out, _ = run(engine, "split", {"enable_thinking": False})
    o = out.outputs[0]
    assert (o.reasoning_text, o.text, o.num_reasoning_tokens) == ("", SCRIPTS["split"].answer, 0)


def test_without_split_reasoning_the_tags_are_answer_text(engine) -> None:
    out, _ = run(engine, "split", split_reasoning=False)
    o = out.outputs[0]
    assert o.reasoning_text == "" and o.text == f"<think>{SCRIPTS['split'].reasoning}</think>{SCRIPTS['split'].answer}"


def test_a_model_without_think_tags_ignores_split_reasoning() -> None:
    tok = tiny_tokenizer()
    net = tiny_llama(tok.vocab_size, max_model_len=128)
    engine = LLMEngine(net, net.config, tok, EngineConfig(kv_cache_memory=2**20, max_model_len=128), 128)
    assert engine.reasoning_tags is None
    prompt = tok.encode("Hello", add_special_tokens=False)
    outs = {}
    for split in (False, True):
        engine.add_request(f"s{split}", prompt, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True,
                                                               split_reasoning=split, max_reasoning_tokens=0))
        while engine.has_unfinished():
            outs.update({u.request_id: u.outputs[0] for u in engine.step() if u.finished})
    assert outs["sTrue"].token_ids == outs["sFalse"].token_ids and outs["sTrue"].reasoning_text == ""


def test_a_tag_typed_by_the_user_does_not_open_the_section(engine) -> None:
    out, _ = run(engine, "split <think>")       # the last user message ends with the open tag's token
    o = out.outputs[0]
    assert (o.reasoning_text, o.text) == (SCRIPTS["split"].reasoning, SCRIPTS["split"].answer)
