"""Request models: strict types, unknown fields refused, conversion to SamplingParams."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from haltwise.sampling_params import ParamError
from haltwise.server.errors import _param_from_loc
from haltwise.server.surfaces.openai_protocol import ChatCompletionRequest, CompletionRequest


def test_completion_fields_reach_sampling_params() -> None:
    req = CompletionRequest.model_validate({
        "prompt": "hi", "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1, "seed": 4,
        "stop": "x", "stop_token_ids": [5], "include_stop_str_in_output": True, "min_tokens": 2,
        "ignore_eos": True, "skip_special_tokens": False, "repetition_penalty": 1.2, "frequency_penalty": 0.5,
        "presence_penalty": -0.5, "timeout": 3.5, "truncate_prompt_tokens": 9, "stop_presets": ["line", "json"],
        "repetition_detection": {"max_period": 8, "min_repeats": 3}, "logprobs": 2, "n": 2,
    })
    p = req.to_sampling_params()
    assert (p.max_tokens, p.temperature, p.top_p, p.top_k, p.min_p, p.seed) == (7, 0, 0.5, 3, 0.1, 4)
    assert p.stop == ("x",) and p.stop_token_ids == (5,) and p.stop_presets == ("line", "json")
    assert p.include_stop_str_in_output and p.ignore_eos and not p.skip_special_tokens
    assert (p.min_tokens, p.repetition_penalty, p.frequency_penalty, p.presence_penalty) == (2, 1.2, 0.5, -0.5)
    assert (p.timeout, p.truncate_prompt_tokens, p.logprobs, p.n) == (3.5, 9, 2, 2)
    assert (p.repetition_detection.max_period, p.repetition_detection.min_repeats) == (8, 3)
    assert p.repetition_detection.min_tokens == 16  # the documented default survives a partial override


def test_max_tokens_omitted_means_rest_of_window() -> None:
    assert CompletionRequest.model_validate({"prompt": "x"}).to_sampling_params().max_tokens is None


def test_chat_max_completion_tokens_wins_and_logprobs_map() -> None:
    req = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "a"}], "max_tokens": 5,
                                                "max_completion_tokens": 3, "logprobs": True, "top_logprobs": 2})
    p = req.to_sampling_params()
    assert p.max_tokens == 3 and p.logprobs == 2
    plain = ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "a"}]})
    assert plain.to_sampling_params().logprobs is None


def test_content_parts_are_joined() -> None:
    req = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})
    assert req.template_messages() == [{"role": "user", "content": "ab"}]


@pytest.mark.parametrize("body, loc", [
    ({"prompt": "x", "bogus": 1}, ("bogus",)),
    ({"prompt": "x", "max_tokens": "5"}, ("max_tokens",)),
    ({"prompt": "x", "stream": 1}, ("stream",)),
    ({"prompt": "x", "max_tokens": 2.0}, ("max_tokens",)),
    ({"prompt": "x", "temperature": float("nan")}, ("temperature",)),
    ({"prompt": "x", "top_p": 0}, ("top_p",)),
    ({"prompt": "x", "n": 0}, ("n",)),
    ({"prompt": "x", "stop_presets": ["nope"]}, ("stop_presets", 0)),
    ({"prompt": "x", "repetition_detection": {"min_repeats": 1}}, ("repetition_detection", "min_repeats")),
])
def test_schema_rejects(body: dict, loc: tuple) -> None:
    with pytest.raises(ValidationError) as info:
        CompletionRequest.model_validate(body)
    assert any(tuple(e["loc"][:len(loc)]) == loc for e in info.value.errors())


@pytest.mark.parametrize("body, param", [
    ({"prompt": "x", "stop": [""]}, "stop"),
    ({"prompt": "x", "stop": ["s"] * 65}, "stop"),
    ({"prompt": "x", "stop": ["s" * 257]}, "stop"),
    ({"prompt": "x", "logit_bias": {"five": 1.0}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"-5": 1.0}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"5": 100.5}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"5": -101.0}}, "logit_bias"),
    ({"prompt": "x", "suffix": "y"}, "suffix"),
    ({"prompt": "x", "best_of": 3}, "best_of"),
    ({"prompt": "x", "min_tokens": 5, "max_tokens": 2}, "min_tokens"),
])
def test_completion_param_errors(body: dict, param: str) -> None:
    with pytest.raises(ParamError) as info:
        CompletionRequest.model_validate(body).to_sampling_params()
    assert info.value.param == param


@pytest.mark.parametrize("extra, param", [
    ({"functions": [{"name": "f"}]}, "functions"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"top_logprobs": 2}, "top_logprobs"),
])
def test_chat_param_errors(extra: dict, param: str) -> None:
    body = {"messages": [{"role": "user", "content": "a"}], **extra}
    with pytest.raises(ParamError) as info:
        ChatCompletionRequest.model_validate(body).to_sampling_params()
    assert info.value.param == param


def test_ignored_fields_are_accepted_and_change_nothing() -> None:
    req = CompletionRequest.model_validate({"prompt": "x", "user": "u1", "store": False, "metadata": {"a": "b"},
                                            "service_tier": "auto", "logit_bias": {}})
    assert req.to_sampling_params() == CompletionRequest.model_validate({"prompt": "x"}).to_sampling_params()


@pytest.mark.parametrize("prompt, expected", [
    ("ab", ["ab"]), (["a", "b"], ["a", "b"]), ([1, 2], [[1, 2]]), ([[1], [2, 3]], [[1], [2, 3]]),
])
def test_prompt_shapes(prompt: object, expected: list) -> None:
    assert CompletionRequest.model_validate({"prompt": prompt}).prompts() == expected


@pytest.mark.parametrize("prompt", ["", [], [[]], ["a", ""]])
def test_empty_prompt_rejected(prompt: object) -> None:
    with pytest.raises(ParamError):
        CompletionRequest.model_validate({"prompt": prompt}).prompts()


def test_param_path_drops_union_tags() -> None:
    assert _param_from_loc(("body", "messages", 0, "content", "str")) == "messages[0].content"
    assert _param_from_loc(("body", "prompt", "list[int]", 1)) == "prompt[1]"
    assert _param_from_loc(("body",)) is None
