"""Tool calls through the engine (tiny random model, random logits): the contract for tool calls.

Random tool schemas x tool_choice required / named / auto x random cuts (max_tokens, eager loop
detectors, stop strings, deadlines): a choice that ends "tool_calls" holds calls that parse and validate
against their tools; a call cut before it closed never ends "tool_calls" (nor "stop").
"""
from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from haltwise.llm import LLM
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.termination import Reason
from tests.engine.test_structure_contract import EAGER_LOOPS
from tests.structured.test_llguidance_backend import schemas

params_schemas = st.dictionaries(st.sampled_from(["a", "b", "c"]), schemas, min_size=0, max_size=2).map(
    lambda props: {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False})
cuts = st.fixed_dictionaries({
    "max_tokens": st.integers(1, 120),
    "repetition_detection": st.sampled_from([EAGER_LOOPS, RepetitionDetection(), RepetitionDetection(enabled=False)]),
    "stop": st.lists(st.sampled_from(['"', "}", "call"]), max_size=1).map(tuple),
    "timeout": st.sampled_from([None, None, None, 1e-9]),
})
MESSAGES = [{"role": "user", "content": "What is the weather?"}]


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(tiny=True, kv_cache_memory=8 * 2**20, max_model_len=512)


def tool(name: str, schema: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": schema}}


def check(o, tools: dict) -> None:
    t = o.termination
    if o.finish_reason == "tool_calls":   # ended by itself, or a loop cut after the calls (call_ends.py)
        assert t.reason in (Reason.TOOL_CALL, Reason.TOOL_LOOP) and not t.structure_incomplete and o.tool_calls
        for c in o.tool_calls:
            jsonschema.validate(json.loads(c["function"]["arguments"]), tools[c["function"]["name"]])
            assert c["function"]["name"] in t.detail
    elif o.finish_reason == "stop":        # auto: the model answered in text; no call may be open
        assert not o.tool_calls and not t.structure_incomplete and t.reason is not Reason.TOOL_CALL
    else:
        assert o.finish_reason == "length", t


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(a=params_schemas, b=params_schemas, choice=st.sampled_from(["required", "named", "auto"]),
       parallel=st.booleans(), seed=st.integers(0, 2**31), cut=cuts)
def test_tool_calls_end_complete_or_length(llm, a, b, choice, parallel, seed, cut) -> None:
    tools = {"f": a, "g": b}
    tool_choice = {"type": "function", "function": {"name": "g"}} if choice == "named" else choice
    p = SamplingParams(n=2, seed=seed, temperature=1.0, **cut)
    out = llm.chat(MESSAGES, p, tools=[tool(n, s) for n, s in tools.items()], tool_choice=tool_choice,
                   parallel_tool_calls=parallel)[0]
    for o in out.outputs:
        check(o, tools)
        if o.finish_reason == "tool_calls" and choice == "named":
            assert {c["function"]["name"] for c in o.tool_calls} == {"g"}
        if o.finish_reason == "tool_calls" and not parallel:
            assert len(o.tool_calls) == 1


def test_required_calls_complete_often(llm) -> None:
    """Not vacuous: with small schemas the random model does finish calls."""
    tools = {"f": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                   "required": ["n"], "additionalProperties": False}}
    done = 0
    for seed in range(8):
        o = llm.chat(MESSAGES, SamplingParams(seed=seed, temperature=1.0, max_tokens=60,
                                              repetition_detection=RepetitionDetection(enabled=False)),
                     tools=[tool("f", tools["f"])], tool_choice="required", parallel_tool_calls=False)[0].outputs[0]
        check(o, tools)
        done += o.finish_reason == "tool_calls"
    assert done >= 4


def test_cut_call_is_length_and_names_the_layer(llm) -> None:
    o = llm.chat(MESSAGES, SamplingParams(temperature=0.0, max_tokens=4), tools=[tool("f", {"type": "object"})],
                 tool_choice="required")[0].outputs[0]
    t = o.termination
    assert o.finish_reason == "length" and t.reason is Reason.MAX_TOKENS and "tool call is incomplete" in t.detail
