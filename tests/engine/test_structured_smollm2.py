"""Grammar-constrained generation on the real SmolLM2-135M-Instruct."""
from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from haltwise.sampling_params import SamplingParams
from haltwise.stopping.termination import Reason
from haltwise.structured.spec import StructuredOutputs
from tests.structured.test_llguidance_backend import schemas

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Describe a fictional person as JSON with a name and an age."}]


def test_json_schema_greedy_ends_at_the_closing_brace(smollm2) -> None:
    p = SamplingParams(temperature=0.0, max_tokens=80, structured_outputs=StructuredOutputs(json=PERSON, name="p"))
    out = smollm2.chat(ASK, p)[0].outputs[0]
    assert out.termination.reason is Reason.GRAMMAR and out.finish_reason == "stop"
    jsonschema.validate(json.loads(out.text), PERSON)
    assert out.text.rstrip().endswith("}") and out.termination.char_offset == len(out.text)


def test_json_object_first_output_is_an_object(smollm2) -> None:
    p = SamplingParams(temperature=0.0, max_tokens=40, structured_outputs=StructuredOutputs(json_object=True))
    out = smollm2.chat(ASK, p)[0].outputs[0]
    assert out.text.startswith("{")
    if out.termination.reason is Reason.GRAMMAR:
        assert isinstance(json.loads(out.text), dict)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(schema=schemas, seed=st.integers(0, 2**31))
def test_random_schemas_sampled_completions_validate(smollm2, schema, seed) -> None:
    p = SamplingParams(temperature=1.0, seed=seed, max_tokens=24, structured_outputs=StructuredOutputs(json=schema))
    out = smollm2.chat(ASK, p)[0].outputs[0]
    if out.termination.reason is Reason.GRAMMAR:
        jsonschema.validate(json.loads(out.text), schema)
    else:
        assert out.termination.reason in (Reason.MAX_TOKENS, Reason.REPETITION)
