"""instructor (its own venv: it pins an older openai) over chat completions: response_model, as its README."""
from __future__ import annotations

import instructor
import openai
from _common import EXTRACT, MAX_TOKENS, Person, check_person, http_client, main


def client(base_url: str, mode):
    oai = openai.OpenAI(base_url=base_url + "/v1", api_key="unused", http_client=http_client(), max_retries=0)
    return instructor.from_openai(oai, mode=mode)


def tools_mode(base_url: str) -> str:
    person = client(base_url, instructor.Mode.TOOLS).chat.completions.create(
        model="qwen2.5-coder-0.5b", response_model=Person, max_tokens=MAX_TOKENS, temperature=0,
        messages=[{"role": "user", "content": EXTRACT}])
    return check_person(person)


def json_mode(base_url: str) -> str:
    person = client(base_url, instructor.Mode.JSON).chat.completions.create(
        model="qwen2.5-coder-0.5b", response_model=Person, max_tokens=MAX_TOKENS, temperature=0,
        messages=[{"role": "user", "content": EXTRACT}])
    return check_person(person)


def partial_stream(base_url: str) -> str:
    parts = list(client(base_url, instructor.Mode.TOOLS).chat.completions.create_partial(
        model="qwen2.5-coder-0.5b", response_model=Person, max_tokens=MAX_TOKENS, temperature=0,
        messages=[{"role": "user", "content": EXTRACT}]))
    assert len(parts) > 1, len(parts)
    return check_person(Person.model_validate(parts[-1].model_dump()))


if __name__ == "__main__":
    main({f.__name__: f for f in (tools_mode, json_mode, partial_stream)})
