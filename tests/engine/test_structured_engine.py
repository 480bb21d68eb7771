"""Grammar-constrained generation through the engine (tiny random model): how each request ends."""
from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from haltwise.errors import InvalidRequest
from haltwise.llm import LLM
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.termination import Reason
from haltwise.structured.spec import StructuredOutputs
from tests.structured.test_llguidance_backend import schemas

NO_LOOP = RepetitionDetection(enabled=False)
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(tiny=True, kv_cache_memory=8 * 2**20, max_model_len=512)


def params(so: StructuredOutputs, **kw) -> SamplingParams:
    kw.setdefault("repetition_detection", NO_LOOP)
    kw.setdefault("max_tokens", 120)
    return SamplingParams(structured_outputs=so, **kw)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(schema=schemas, seed=st.integers(0, 2**31), temperature=st.sampled_from([0.0, 0.7, 1.5]))
def test_every_stop_finish_parses_and_validates(llm, schema, seed, temperature) -> None:
    out = llm.generate("Answer in JSON.", params(StructuredOutputs(json=schema), n=2, seed=seed,
                                                 temperature=temperature, max_tokens=60))[0]
    for o in out.outputs:
        if o.finish_reason == "stop":
            assert o.termination.reason is Reason.GRAMMAR
            jsonschema.validate(json.loads(o.text), schema)
        else:
            assert o.finish_reason == "length" and o.termination.reason is Reason.MAX_TOKENS


def test_grammar_end_is_business_layer_and_frees_blocks(llm) -> None:
    out = llm.generate("x", params(StructuredOutputs(json=PERSON, name="person"), temperature=0.0))[0].outputs[0]
    t = out.termination
    assert t.reason is Reason.GRAMMAR and t.layer.value == "business" and out.finish_reason == "stop"
    assert "json_schema 'person' complete" in t.detail and out.stop_reason is None
    jsonschema.validate(json.loads(out.text), PERSON)
    assert t.char_offset == len(out.text) and t.token_index == len(out.token_ids) - 1
    assert llm.engine.allocator.num_used_blocks == 0 or llm.engine.config.enable_prefix_caching


def test_truncation_mid_structure_is_length(llm) -> None:
    out = llm.generate("x", params(StructuredOutputs(json=PERSON), temperature=0.0, max_tokens=3))[0].outputs[0]
    assert out.finish_reason == "length" and out.termination.reason is Reason.MAX_TOKENS
    assert len(out.token_ids) == 3 and out.text.startswith("{")


def test_min_tokens_longer_than_the_structure_still_ends_with_the_structure(llm) -> None:
    out = llm.generate("x", params(StructuredOutputs(choice=("yes", "no")), temperature=0.0,
                                   min_tokens=20))[0].outputs[0]
    assert out.text in ("yes", "no") and out.termination.reason is Reason.GRAMMAR


def test_min_tokens_keeps_an_open_regex_going(llm) -> None:
    """[0-9]+ may end after one digit; min_tokens bans the end token while the grammar allows more."""
    out = llm.generate("x", params(StructuredOutputs(regex="[0-9]+"), temperature=1.0, seed=3, min_tokens=6,
                                   max_tokens=30))[0].outputs[0]
    assert out.text.isdigit() and len(out.token_ids) >= 6


def test_stop_string_inside_a_json_value_still_applies(llm) -> None:
    out = llm.generate("x", params(StructuredOutputs(choice=("abcdef",)), temperature=0.0,
                                   stop=("cd",)))[0].outputs[0]
    assert out.text == "ab" and out.termination.reason is Reason.STOP_STRING and out.stop_reason == "cd"


def test_end_token_closing_an_open_regex_is_the_grammars_end(llm) -> None:
    outs = llm.generate("x", params(StructuredOutputs(regex="[a-z]{1,3}"), temperature=1.5, seed=11, n=8))[0].outputs
    for o in outs:
        assert o.termination.reason is Reason.GRAMMAR and 1 <= len(o.text) <= 3 and o.text.isalpha()
    assert any("end token" in o.termination.detail for o in outs)


def test_json_preset_is_a_no_op_under_a_grammar(llm) -> None:
    out = llm.generate("x", params(StructuredOutputs(json=PERSON), temperature=0.0,
                                   stop_presets=("json",)))[0].outputs[0]
    assert out.termination.reason is Reason.GRAMMAR


def test_n_sequences_each_have_their_own_matcher_with_logprobs(llm) -> None:
    out = llm.generate("x", params(StructuredOutputs(json=PERSON), temperature=1.0, seed=5, n=4, logprobs=2))[0]
    for o in out.outputs:
        assert len(o.logprobs) == len(o.token_ids)
        if o.finish_reason == "stop":
            jsonschema.validate(json.loads(o.text), PERSON)
    assert len({o.text for o in out.outputs}) > 1


def test_streaming_equals_non_streaming(llm) -> None:
    p = params(StructuredOutputs(json=PERSON), temperature=0.8, seed=9)
    ids = llm.tokenizer.encode("stream me")
    whole = llm.generate([ids], p)[0].outputs[0]
    deltas = [u.outputs[0].delta_text for u in llm.stream(ids, p)]
    assert "".join(deltas) == whole.text


def test_bad_constraint_is_refused_before_admission(llm) -> None:
    with pytest.raises(InvalidRequest) as info:
        llm.generate("x", params(StructuredOutputs(json={"type": "integer", "minimum": 5, "maximum": 2},
                                                   param="guided_json")))
    assert info.value.param == "guided_json"
    assert not llm.engine.requests
    assert llm.generate("x", params(StructuredOutputs(choice=("ok",))))[0].outputs[0].text == "ok"


def test_preemption_keeps_matchers_in_step() -> None:
    """A pool too small for every sequence: recomputed sequences end exactly as without preemption."""
    prompts = [f"prompt number {i} " * 3 for i in range(8)]
    p = params(StructuredOutputs(regex="[a-z ]{30,50}!"), temperature=0.0, max_tokens=40)
    large = LLM(tiny=True, kv_cache_memory=8 * 2**20, max_model_len=192).generate(prompts, p)
    small = LLM(tiny=True, kv_cache_memory=12 * 16 * 512, max_model_len=192, max_num_batched_tokens=64)
    outs = small.generate(prompts, p)
    assert small.engine.scheduler.num_preemptions > 0
    for a, b in zip(large, outs):
        assert a.outputs[0].text == b.outputs[0].text and a.outputs[0].termination == b.outputs[0].termination
