"""The openai SDK's structured-output and streaming helpers, as its README and helpers.md show them."""
from __future__ import annotations

import json

import openai
from _common import (ASK_WEATHER, EXTRACT, MAX_TOKENS, Person, check_person, check_weather_answer, get_weather,
                     http_client,
                     loop_case, main)


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key="unused", http_client=http_client(), max_retries=0)


def chat_parse(base_url: str) -> str:
    c = client(base_url)
    done = c.chat.completions.parse(model="qwen2.5-coder-0.5b", messages=[{"role": "user", "content": EXTRACT}],
                                    response_format=Person, max_completion_tokens=MAX_TOKENS, temperature=0)
    return check_person(done.choices[0].message.parsed)


def beta_chat_parse(base_url: str) -> str:
    c = client(base_url)
    done = c.beta.chat.completions.parse(model="qwen2.5-coder-0.5b", messages=[{"role": "user", "content": EXTRACT}],
                                         response_format=Person, max_completion_tokens=MAX_TOKENS, temperature=0)
    return check_person(done.choices[0].message.parsed)


def chat_stream(base_url: str) -> str:
    c = client(base_url)
    with c.chat.completions.stream(model="qwen2.5-coder-0.5b", messages=[{"role": "user", "content": EXTRACT}],
                                   response_format=Person, max_completion_tokens=MAX_TOKENS, temperature=0) as stream:
        deltas = sum(1 for event in stream if event.type == "content.delta")
        done = stream.get_final_completion()
    assert deltas > 1, f"{deltas} content deltas"
    return check_person(done.choices[0].message.parsed)


@loop_case
def chat_tool_loop(base_url: str) -> str:
    """parse() with a pydantic_function_tool, run the call, send the result back, get the answer."""
    from pydantic import BaseModel

    class GetWeather(BaseModel):
        """Get the current weather in a city."""

        city: str

    c = client(base_url)
    messages = [{"role": "user", "content": ASK_WEATHER}]
    first = c.chat.completions.parse(model="qwen2.5-coder-0.5b", messages=messages, max_completion_tokens=MAX_TOKENS,
                                     temperature=0,
                                     tools=[openai.pydantic_function_tool(GetWeather, name="get_weather")])
    call = first.choices[0].message.tool_calls[0]
    messages += [first.choices[0].message,   # as the docs append it
                 {"role": "tool", "tool_call_id": call.id, "content": get_weather(call.function.parsed_arguments.city)}]
    final = c.chat.completions.create(model="qwen2.5-coder-0.5b", messages=messages,
                                      max_completion_tokens=MAX_TOKENS, temperature=0,
                                      tools=[openai.pydantic_function_tool(GetWeather, name="get_weather")])
    return check_weather_answer(final.choices[0].message.content)


def responses_parse(base_url: str) -> str:
    c = client(base_url)
    done = c.responses.parse(model="qwen2.5-coder-0.5b", input=EXTRACT, text_format=Person,
                             max_output_tokens=MAX_TOKENS, temperature=0)
    return check_person(done.output_parsed)


def responses_stream(base_url: str) -> str:
    c = client(base_url)
    with c.responses.stream(model="qwen2.5-coder-0.5b", input=EXTRACT, text_format=Person,
                            max_output_tokens=MAX_TOKENS, temperature=0) as stream:
        deltas = sum(1 for event in stream if event.type == "response.output_text.delta")
        done = stream.get_final_response()
    assert deltas > 1, f"{deltas} text deltas"
    return check_person(done.output_parsed)


@loop_case
def responses_tool_loop(base_url: str) -> str:
    """The Responses function-calling guide: create, run each function_call, send function_call_output."""
    c = client(base_url)
    tools = [{"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                             "additionalProperties": False}, "strict": True}]
    items: list = [{"role": "user", "content": ASK_WEATHER}]
    first = c.responses.create(model="qwen2.5-coder-0.5b", input=items, tools=tools, max_output_tokens=MAX_TOKENS,
                               temperature=0)
    items += first.output
    for item in first.output:
        if item.type == "function_call":
            items.append({"type": "function_call_output", "call_id": item.call_id,
                          "output": get_weather(**json.loads(item.arguments))})
    assert len(items) > 2, f"no function_call: {first.output}"
    final = c.responses.create(model="qwen2.5-coder-0.5b", input=items, tools=tools, max_output_tokens=MAX_TOKENS,
                               temperature=0)
    return check_weather_answer(final.output_text)


if __name__ == "__main__":
    main({f.__name__: f for f in (chat_parse, beta_chat_parse, chat_stream, chat_tool_loop, responses_parse,
                                  responses_stream, responses_tool_loop)})
