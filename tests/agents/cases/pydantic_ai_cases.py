"""pydantic-ai's Agent on its OpenAI chat, OpenAI Responses and Anthropic models: output types and tools."""
from __future__ import annotations

import anthropic
import openai
from _common import (ASK_WEATHER, EXTRACT, Person, async_http_client, check_person, check_weather_answer, loop_case,
                     main)
from _common import get_weather as weather
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

SETTINGS = {"max_tokens": 200, "temperature": 0}
# pydantic-ai's Anthropic model drops `temperature` (the anthropic SDK has none any more); the API takes it
ANTHROPIC_SETTINGS = {**SETTINGS, "extra_body": {"temperature": 0}}


def model(base_url: str, surface: str):
    if surface == "anthropic":
        # anthropic-version 2023-06-01: pydantic-ai drops sampling settings (temperature 0 included, and so
        # the case's determinism) for the SDK's newer default version; the server accepts both
        client = anthropic.AsyncAnthropic(base_url=base_url, api_key="unused", http_client=async_http_client(),
                                          max_retries=0, default_headers={"anthropic-version": "2023-06-01"})
        return AnthropicModel("qwen2.5-coder-0.5b", provider=AnthropicProvider(anthropic_client=client))
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", http_client=async_http_client(),
                                max_retries=0)
    cls = OpenAIChatModel if surface == "chat" else OpenAIResponsesModel
    return cls("qwen2.5-coder-0.5b", provider=OpenAIProvider(openai_client=client))


def settings(surface: str) -> dict:
    return ANTHROPIC_SETTINGS if surface == "anthropic" else SETTINGS


def output_type(base_url: str, surface: str) -> str:
    agent = Agent(model(base_url, surface), output_type=Person, model_settings=settings(surface))
    return check_person(agent.run_sync(EXTRACT).output)


@loop_case
def tools(base_url: str, surface: str) -> str:
    agent = Agent(model(base_url, surface), instructions="Be concise.", model_settings=settings(surface))

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return weather(city)

    return check_weather_answer(agent.run_sync(ASK_WEATHER).output)


if __name__ == "__main__":
    main({f"{s}_{kind.__name__}": (lambda u, k=kind, s=s: k(u, s))
          for s in ("chat", "responses", "anthropic") for kind in (output_type, tools)})
