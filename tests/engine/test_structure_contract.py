"""The structure contract (SPEC §11): a choice that ends "stop" parses and validates; a cut structure never does.
A loop inside a JSON value is closed by the server (forced_close): "length", and the JSON still validates.

Random schemas x random logits (tiny random model, temperature > 0) x random cuts by every layer that can
end a sequence: the loop detectors (set to fire early), max_tokens, a deadline, stop strings.
"""
from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from haltwise.llm import LLM
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.termination import Reason
from haltwise.structured.spec import StructuredOutputs
from tests.structured.test_llguidance_backend import schemas

EAGER_LOOPS = RepetitionDetection(max_period=4, min_repeats=2, min_tokens=2, near_loop_window=8,
                                  near_loop_ngram=2, near_loop_max_novelty=0.9)
cuts = st.fixed_dictionaries({
    "max_tokens": st.integers(1, 60),
    "repetition_detection": st.sampled_from([EAGER_LOOPS, RepetitionDetection()]),
    "stop": st.lists(st.sampled_from(['"', ",", ":", "1", "]"]), max_size=2).map(tuple),
    "timeout": st.sampled_from([None, None, None, 1e-9]),
})


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(tiny=True, kv_cache_memory=8 * 2**20, max_model_len=512)


def _check(o, schema) -> None:
    t = o.termination
    if o.finish_reason == "stop":
        jsonschema.validate(json.loads(o.text), schema)
        assert not t.structure_incomplete
    elif t.forced_close:                     # a loop closed by the grammar's shortest completion
        assert o.finish_reason == "length" and t.reason is Reason.REPETITION, t
        jsonschema.validate(json.loads(o.text), schema)
        assert not t.structure_incomplete
    else:
        assert o.finish_reason == "length", t
        assert t.structure_incomplete and "is incomplete" in t.detail


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(schema=schemas, seed=st.integers(0, 2**31), cut=cuts)
def test_no_cut_structure_ends_stop(llm, schema, seed, cut) -> None:
    p = SamplingParams(structured_outputs=StructuredOutputs(json=schema), n=2, seed=seed, temperature=1.0, **cut)
    for o in llm.generate("Answer in JSON.", p)[0].outputs:
        _check(o, schema)


@pytest.mark.parametrize("cut, reason", [
    ({"max_tokens": 3}, Reason.MAX_TOKENS),
    ({"timeout": 1e-9}, Reason.TIMEOUT),
    ({"stop": ('"',)}, Reason.STOP_STRING),
])
def test_each_cutting_layer_is_named_and_length(llm, cut, reason) -> None:
    """A long free string under a grammar: each layer cuts it; finish is length, the layer is named."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 40}}, "required": ["s"]}
    kw = {"max_tokens": 200, "temperature": 0.0, **cut}
    out = llm.generate("x", SamplingParams(structured_outputs=StructuredOutputs(json=schema), **kw))[0].outputs[0]
    t = out.termination
    assert t.reason is reason and out.finish_reason == "length", t
    assert t.structure_incomplete and "json_schema is incomplete" in t.detail


def test_a_loop_in_a_json_string_is_closed_valid_and_length(llm) -> None:
    """The loop detector inside a structure closes it (structured/closing.py): the JSON validates, the answer
    says it was cut (length), and the record names the rule layer and the JSON path it closed."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 40}}, "required": ["s"]}
    params = SamplingParams(structured_outputs=StructuredOutputs(json=schema), max_tokens=200, temperature=0.0,
                            repetition_detection=EAGER_LOOPS)
    o = llm.generate("x", params)[0].outputs[0]
    t = o.termination
    if t.reason is not Reason.REPETITION:
        pytest.skip(f"the tiny model did not loop here ({t.reason.value})")
    assert t.forced_close and not t.structure_incomplete and o.finish_reason == "length", t
    jsonschema.validate(json.loads(o.text), schema)
    assert "$.s" in t.detail, t.detail


def test_without_a_grammar_a_loop_still_ends_stop(llm) -> None:
    """The contract changes nothing outside structures: a loop in free text is still a complete "stop"."""
    out = llm.generate("x", SamplingParams(temperature=0.0, max_tokens=200, repetition_detection=EAGER_LOOPS))[0]
    o = out.outputs[0]
    if o.termination.reason is Reason.REPETITION:
        assert o.finish_reason == "stop" and not o.termination.structure_incomplete
