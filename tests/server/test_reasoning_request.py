"""Reasoning settings -> budget and template variables (server/reasoning_request.py)."""
from __future__ import annotations

import pytest

from haltwise.sampling_params import ParamError
from haltwise.server.surfaces.openai_protocol import ChatCompletionRequest
from haltwise.server.reasoning_request import EFFORT_BUDGETS, reasoning_budget, template_kwargs, thinking_settings


def test_documented_effort_budgets_and_an_explicit_number_wins() -> None:
    assert EFFORT_BUDGETS == {"none": 0, "minimal": 256, "low": 1024, "medium": 4096, "high": 16384}
    assert [reasoning_budget(e, None) for e in EFFORT_BUDGETS] == [0, 256, 1024, 4096, 16384]
    assert reasoning_budget("high", 7) == 7 and reasoning_budget(None, None) is None
    with pytest.raises(ParamError) as e:
        reasoning_budget("max", None, param="reasoning.effort")
    assert e.value.param == "reasoning.effort"


def test_template_kwargs_pass_through_and_reserved_names_refused() -> None:
    assert template_kwargs({"enable_thinking": True, "custom": 1}) == {"enable_thinking": True, "custom": 1}
    assert template_kwargs(None, "low") == {"reasoning_effort": "low"}
    assert template_kwargs(None, "none") == {"reasoning_effort": "none", "enable_thinking": False}
    assert template_kwargs({"enable_thinking": True}, "none")["enable_thinking"] is True   # the caller's wins
    for bad in ({"messages": []}, {"add_generation_prompt": False}, {"enable_thinking": "yes"}):
        with pytest.raises(ParamError) as e:
            template_kwargs(bad)
        assert e.value.param == "chat_template_kwargs"


def test_anthropic_thinking_settings() -> None:
    assert thinking_settings(None, None) == (None, {})
    assert thinking_settings(True, 99) == (99, {"enable_thinking": True})
    assert thinking_settings(False, None) == (0, {"enable_thinking": False})


def test_chat_request_sets_split_and_budget() -> None:
    body = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "x"}],
                                                 "reasoning_effort": "low"})
    p = body.to_sampling_params()
    assert p.split_reasoning and p.max_reasoning_tokens == 1024
    plain = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "x"}]}).to_sampling_params()
    assert plain.split_reasoning and plain.max_reasoning_tokens is None
    history = ChatCompletionRequest.model_validate({"messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "reasoning_content": "because"}]})
    assert history.template_messages()[1]["reasoning_content"] == "because"
