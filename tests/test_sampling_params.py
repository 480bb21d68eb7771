"""SamplingParams is the one place `stop` is normalised: every surface hands over the value as the client sent it."""
from __future__ import annotations

import pytest

from haltwise.sampling_params import SamplingParams
from haltwise.server.surfaces.anthropic_protocol import MessagesRequest
from haltwise.server.surfaces.openai_protocol import ChatCompletionRequest, CompletionRequest
from haltwise.server.surfaces.openai_responses_protocol import ResponsesRequest

CASES = [("END", ("END",)), (["END", "\n\n"], ("END", "\n\n")), (None, ())]


@pytest.mark.parametrize("stop, expected", CASES)
def test_stop_is_normalised_to_a_tuple(stop, expected) -> None:
    assert SamplingParams(stop=stop).stop == expected


@pytest.mark.parametrize("stop, expected", CASES)
def test_every_surface_hands_stop_over_as_sent(stop, expected) -> None:
    user = [{"role": "user", "content": "hi"}]
    assert ChatCompletionRequest(messages=user, stop=stop).to_sampling_params().stop == expected
    assert CompletionRequest(prompt="hi", stop=stop).to_sampling_params().stop == expected
    assert ResponsesRequest(input="hi", stop=stop).to_turn().params.stop == expected
    if not isinstance(stop, str):   # Anthropic's stop_sequences is a list
        assert MessagesRequest(model="m", max_tokens=8, messages=user, stop_sequences=stop).to_turn().params.stop == expected
