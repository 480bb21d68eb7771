"""The anthropic SDK against /v1/messages: the tool-use loop of its docs, the stream helper, parse()."""
from __future__ import annotations

import anthropic
from _common import (ASK_WEATHER, EXTRACT, MAX_TOKENS, Person, check_person, check_weather_answer, get_weather,
                     http_client,
                     loop_case, main)

GREEDY = {"temperature": 0}   # the SDK's methods have no temperature parameter any more; the API still takes it
WEATHER_TOOL = {"name": "get_weather", "description": "Get the current weather in a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def client(base_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key="unused", http_client=http_client(), max_retries=0)


@loop_case
def tool_loop(base_url: str) -> str:
    """The docs' loop: while stop_reason is tool_use, run each tool_use and answer it with a tool_result."""
    c = client(base_url)
    messages: list = [{"role": "user", "content": ASK_WEATHER}]
    for _ in range(4):
        reply = c.messages.create(model="qwen2.5-coder-0.5b", max_tokens=MAX_TOKENS, extra_body=GREEDY,
                                  tools=[WEATHER_TOOL],
                                  messages=messages)
        if reply.stop_reason != "tool_use":
            break
        messages.append({"role": "assistant", "content": reply.content})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": get_weather(**b.input)}
            for b in reply.content if b.type == "tool_use"]})
    assert len(messages) > 1, "the model never called the tool"
    assert reply.stop_reason == "end_turn", f"the loop did not finish: {reply.stop_reason} {reply.content}"
    return check_weather_answer("".join(b.text for b in reply.content if b.type == "text"))


@loop_case
def tool_runner(base_url: str) -> str:
    """The SDK's beta tool runner with a @beta_tool function."""
    @anthropic.beta_tool
    def get_weather_tool(city: str) -> str:
        """Get the current weather in a city.

        Args:
            city: the city's name
        """
        return get_weather(city)

    get_weather_tool.name = "get_weather"
    runner = client(base_url).beta.messages.tool_runner(
        model="qwen2.5-coder-0.5b", max_tokens=MAX_TOKENS, extra_body=GREEDY, tools=[get_weather_tool],
        max_iterations=4, messages=[{"role": "user", "content": ASK_WEATHER}])
    last = runner.until_done()
    return check_weather_answer("".join(b.text for b in last.content if b.type == "text"))


def stream_text(base_url: str) -> str:
    with client(base_url).messages.stream(model="qwen2.5-coder-0.5b", max_tokens=MAX_TOKENS, extra_body=GREEDY,
                                          messages=[{"role": "user", "content": EXTRACT}]) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 1 and final.stop_reason == "end_turn", (len(pieces), final.stop_reason)
    text = "".join(pieces)
    assert "31" in text and "john" in text.lower(), text
    return text.strip()[:120]


def parse(base_url: str) -> str:
    """messages.parse(output_format=Person): structured outputs."""
    done = client(base_url).messages.parse(model="qwen2.5-coder-0.5b", max_tokens=MAX_TOKENS, extra_body=GREEDY,
                  output_format=Person,
                                           messages=[{"role": "user", "content": EXTRACT}])
    return check_person(done.parsed_output)


if __name__ == "__main__":
    main({f.__name__: f for f in (tool_loop, tool_runner, stream_text, parse)})
