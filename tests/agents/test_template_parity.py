"""What haltwise feeds the model for the agent libraries' tool-result turns == the model's own chat template
rendered by transformers' apply_chat_template on the same messages and tools.

The turns (wire_turns.json) are request bodies the libraries of test_libraries.py sent, recorded on the wire:
the turn after a tool result on every surface (OpenAI chat, Responses, Anthropic Messages), with the
system prompts and retry prompts the libraries add. For Responses and Messages the reference messages are
the server's translation into the chat shape (transformers has no such API); the tools are the request's.
One difference is haltwise's on purpose and is applied to the reference first: a tool call's `arguments`
(JSON text on the wire) reach the template as the object it encodes, the form Qwen's template writes with
`tojson` and the model was trained on (transformers would write the text as a quoted JSON string).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from haltwise.sampling_params import SamplingParams
from haltwise.server.chat_prompt import for_template
from haltwise.server.chat_tools import prepare_chat
from haltwise.server.surfaces.anthropic_protocol import MessagesRequest
from haltwise.server.surfaces.openai_protocol import ChatCompletionRequest
from haltwise.server.surfaces.openai_responses_protocol import ResponsesRequest
from haltwise.tokenizer.tokenizer import Tokenizer
from haltwise.tokenizer.untrusted import ChatEncoder
from tests.models.real_models import real_model_path

pytestmark = pytest.mark.slow     # transformers converts the GGUF's tokenizer (~20 s on a busy host)

TURNS = json.loads((Path(__file__).parent / "wire_turns.json").read_text())


@pytest.fixture(scope="module")
def tokenizers() -> tuple[Tokenizer, Any]:
    import transformers

    path = real_model_path("qwen2.5-coder-0.5b")
    return Tokenizer.from_gguf(path), transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def haltwise_prompt(sent: dict[str, Any], tok: Tokenizer) -> tuple[str, list[dict[str, Any]], Any]:
    """(the prompt text haltwise renders, the chat-shaped messages, the template's tools) for one request."""
    body = sent["body"]
    if sent["path"] == "/v1/chat/completions":
        req = ChatCompletionRequest.model_validate(body)
        messages, tools, choice, parallel = req.template_messages(), req.tools, req.tool_choice, req.parallel_tool_calls
        reference = body["messages"]
    else:
        req = (ResponsesRequest if sent["path"] == "/v1/responses" else MessagesRequest).model_validate(body)
        turn = req.to_turn()
        messages, tools, choice, parallel = turn.messages, turn.tools, turn.tool_choice, turn.parallel_tool_calls
        reference = turn.messages
    plan, _, checked, kwargs = prepare_chat(tools, choice, parallel, messages, SamplingParams(), tok, None)
    text, _ = ChatEncoder(tok).encode_chat(checked, **kwargs)
    return text, reference, tools if plan is not None and plan.template_tools else None


@pytest.mark.parametrize("sent", TURNS, ids=[t["case"] for t in TURNS])
def test_prompt_is_the_models_own_template(sent: dict[str, Any], tokenizers: tuple[Tokenizer, Any]) -> None:
    tok, hf = tokenizers
    ours, messages, tools = haltwise_prompt(sent, tok)
    theirs = hf.apply_chat_template(for_template(messages), tools=tools, add_generation_prompt=True, tokenize=False)
    assert ours == theirs


def test_the_turns_cover_a_tool_result_on_every_surface() -> None:
    with_result = {t["path"] for t in TURNS if "Paris: 18 degrees" in json.dumps(t["body"])}
    assert with_result == {"/v1/chat/completions", "/v1/responses", "/v1/messages"}
