"""The OpenAI Agents SDK on both of its model classes (chat completions and Responses), as its docs show."""
from __future__ import annotations

import openai
from _common import (ASK_WEATHER, EXTRACT, Person, async_http_client, check_person, check_weather_answer, loop_case,
                     main)
from _common import get_weather as weather
from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool,
                    set_tracing_disabled)

set_tracing_disabled(True)   # traces go to OpenAI's backend otherwise


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return weather(city)


def model(base_url: str, surface: str):
    client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", http_client=async_http_client(),
                                max_retries=0)
    cls = OpenAIChatCompletionsModel if surface == "chat" else OpenAIResponsesModel
    return cls(model="qwen2.5-coder-0.5b", openai_client=client)


@loop_case
def tools(base_url: str, surface: str) -> str:
    agent = Agent(name="Assistant", instructions="You are a helpful assistant.", tools=[get_weather],
                  model=model(base_url, surface), model_settings=ModelSettings(max_tokens=200, temperature=0))
    result = Runner.run_sync(agent, ASK_WEATHER, max_turns=4)
    return check_weather_answer(result.final_output)


def output_type(base_url: str, surface: str) -> str:
    agent = Agent(name="Extractor", instructions="Extract the person's name and age.", output_type=Person,
                  model=model(base_url, surface), model_settings=ModelSettings(max_tokens=200, temperature=0))
    return check_person(Runner.run_sync(agent, EXTRACT, max_turns=2).final_output)


if __name__ == "__main__":
    main({"chat_tools": lambda u: tools(u, "chat"), "responses_tools": lambda u: tools(u, "responses"),
          "chat_output_type": lambda u: output_type(u, "chat"),
          "responses_output_type": lambda u: output_type(u, "responses")})
