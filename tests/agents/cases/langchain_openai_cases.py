"""langchain-openai's ChatOpenAI: with_structured_output, bind_tools and its tool loop, streaming."""
from __future__ import annotations

from _common import (ASK_WEATHER, EXTRACT, MAX_TOKENS, Person, check_person, check_weather_answer, http_client,
                     loop_case,
                     main)
from _common import get_weather as weather
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return weather(city)


def llm(base_url: str, **kw) -> ChatOpenAI:
    return ChatOpenAI(model="qwen2.5-coder-0.5b", base_url=base_url + "/v1", api_key="unused",
                      http_client=http_client(), max_retries=0, max_tokens=MAX_TOKENS, temperature=0, **kw)


def structured(base_url: str) -> str:
    return check_person(llm(base_url).with_structured_output(Person).invoke(EXTRACT))


@loop_case
def tool_loop(base_url: str) -> str:
    bound = llm(base_url).bind_tools([get_weather])
    messages = [HumanMessage(ASK_WEATHER)]
    ai = bound.invoke(messages)
    assert ai.tool_calls, f"no tool call: {ai.content!r}"
    messages.append(ai)
    messages += [ToolMessage(get_weather.invoke(c["args"]), tool_call_id=c["id"]) for c in ai.tool_calls]
    return check_weather_answer(bound.invoke(messages).content)


def stream(base_url: str) -> str:
    chunks = [c.content for c in llm(base_url).stream(EXTRACT)]
    text = "".join(chunks)
    assert len(chunks) > 1 and "31" in text, (len(chunks), text)
    return text.strip()[:120]


def responses_structured(base_url: str) -> str:
    """ChatOpenAI(use_responses_api=True): the same call over /v1/responses."""
    return check_person(llm(base_url, use_responses_api=True).with_structured_output(Person).invoke(EXTRACT))


if __name__ == "__main__":
    main({f.__name__: f for f in (structured, tool_loop, stream, responses_structured)})
