"""Anthropic Messages request bodies (pydantic, HTTP edge only) and their translation to a ChatTurn.

Accepted: model, max_tokens (required), messages (text / tool_use / tool_result blocks), system (string
or text blocks), stop_sequences, temperature, top_p, top_k, stream, tools + tool_choice, thinking
{"type": "enabled", "budget_tokens": N} (N >= 1 and < max_tokens; Anthropic's minimum of 1024 is not
imposed, small models think briefly) or {"type": "disabled"} (server/reasoning_request.py; no `thinking`
= the template's default, as on /v1/chat/completions), assistant thinking / redacted_thinking blocks in
history (thinking text goes to the template as reasoning_content; redacted data is dropped),
output_config.format {"type": "json_schema", "schema"} (structured outputs: the same grammar path as
response_format on /v1/chat/completions; output_config.effort is a 400, no model here has effort levels);
ignored: metadata, service_tier, cache_control on blocks. `thread` (server-held conversation state) is a
400 whose error.details say `thread_unsupported_request`: the SDK's documented answer for a server that
cannot hold threads, on which its thread helpers (the beta tool runner) resend the whole history without
one. haltwise extras: seed, timeout, ignore_eos. Unknown fields are a 400 naming the field, as on the OpenAI
routes.

Translation (into the OpenAI chat shape the chat core and the chat template speak):
    system                      -> {"role": "system", "content": text}
    user [tool_result..., text] -> {"role": "tool", "tool_call_id", "content"}..., {"role": "user", ...}
    assistant [text, tool_use]  -> {"role": "assistant", "content", "tool_calls": [{id, type, function}]}
    tools [{name, description, input_schema}] -> [{"type": "function", "function": {name, description, parameters}}]
    tool_choice auto | any | tool{name} | none -> "auto" | "required" | {"type": "function", ...} | "none"
"""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from haltwise.sampling_params import ParamError, SamplingParams
from haltwise.server.chat_core import ChatTurn
from haltwise.server.request_fields import MAX_SEED, KeepAlive, RepetitionDetectionSpec, loop_detection
from haltwise.server.reasoning_request import thinking_settings
from haltwise.server.structured_outputs import JsonSchemaFormat, ResponseFormat, structure_of

THREADLESS = ("this server is stateless: it holds no threads (`thread`); send the whole conversation as "
              "`messages` without `thread`")


class ThreadUnsupported(ParamError):
    """`thread` on a stateless server: a 400 whose error.details the anthropic SDK reads (error_code
    thread_unsupported_request) to go on without a thread."""

    details = {"error_code": "thread_unsupported_request", "unsupported": ["thread"]}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class TextBlock(_Strict):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None   # ignored (no prompt caching contract here)
    citations: list[dict[str, Any]] | None = None  # ignored


class ToolUseBlock(_Strict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: dict[str, Any] | None = None


class ToolResultBlock(_Strict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock] | None = None
    is_error: bool | None = None
    cache_control: dict[str, Any] | None = None

    def text(self) -> str:
        body = self.content if isinstance(self.content, str) or self.content is None \
            else "\n".join(b.text for b in self.content)
        return f"Error: {body or ''}" if self.is_error else body or ""


class ThinkingBlock(_Strict):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None      # ours is a digest of the text (anthropic_messages.py); never checked


class RedactedThinkingBlock(_Strict):
    type: Literal["redacted_thinking"]
    data: str


Block = Annotated[Union[TextBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock],
                  Field(discriminator="type")]


class Message(_Strict):
    role: Literal["user", "assistant"]
    content: str | list[Block]


class Tool(_Strict):
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None


class ToolChoice(_Strict):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class Thinking(_Strict):
    type: Literal["enabled", "disabled"]
    budget_tokens: int | None = Field(None, ge=1)


class OutputFormat(_Strict):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Strict):
    format: OutputFormat | None = None
    effort: str | None = None          # a 400 unless absent (see the module docstring)


class _Conversation(_Strict):
    """What /v1/messages and /v1/messages/count_tokens share."""

    model: str
    keep_alive: KeepAlive = None      # Ollama's: how long the model stays loaded after this request
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None

    def chat_messages(self) -> list[dict[str, Any]]:
        """The conversation in OpenAI chat shape (see the module docstring)."""
        out: list[dict[str, Any]] = []
        if self.system:
            out.append({"role": "system", "content": self.system if isinstance(self.system, str)
                        else "\n".join(b.text for b in self.system)})
        for m in self.messages:
            blocks = [TextBlock(type="text", text=m.content)] if isinstance(m.content, str) else m.content
            texts = "".join(b.text for b in blocks if isinstance(b, TextBlock))
            if m.role == "user":
                out += [{"role": "tool", "tool_call_id": b.tool_use_id, "content": b.text()}
                        for b in blocks if isinstance(b, ToolResultBlock)]
                if texts or not any(isinstance(b, ToolResultBlock) for b in blocks):
                    out.append({"role": "user", "content": texts})
                if any(isinstance(b, (ToolUseBlock, ThinkingBlock, RedactedThinkingBlock)) for b in blocks):
                    raise ParamError("messages", "tool_use and thinking blocks belong in assistant messages")
            else:
                calls = [{"id": b.id, "type": "function",
                          "function": {"name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)}}
                         for b in blocks if isinstance(b, ToolUseBlock)]
                if any(isinstance(b, ToolResultBlock) for b in blocks):
                    raise ParamError("messages", "tool_result blocks belong in user messages")
                thinking = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
                out.append({"role": "assistant", "content": texts or None if calls else texts,
                            **({"tool_calls": calls} if calls else {}),
                            **({"reasoning_content": thinking} if thinking else {})})
        return out

    def chat_tools(self) -> list[dict[str, Any]] | None:
        if not self.tools:
            return None
        return [{"type": "function", "function": {       # as a chat client would send it (no empty description)
            "name": t.name, **({"description": t.description} if t.description is not None else {}),
            "parameters": t.input_schema}} for t in self.tools]

    def chat_tool_choice(self) -> str | dict[str, Any] | None:
        c = self.tool_choice
        if c is None:
            return None
        if c.type == "tool":
            if not c.name:
                raise ParamError("tool_choice.name", 'tool_choice {"type": "tool"} needs a name')
            if c.name not in {t.name for t in self.tools or ()}:
                raise ParamError("tool_choice.name", f"tool_choice names an undeclared tool: {c.name!r}")
            return {"type": "function", "function": {"name": c.name}}
        return {"auto": "auto", "any": "required", "none": "none"}[c.type]

    def parallel_tool_calls(self) -> bool | None:
        """tool_choice.disable_parallel_tool_use: true -> at most one tool_use block."""
        c = self.tool_choice
        return None if c is None or c.disable_parallel_tool_use is None else not c.disable_parallel_tool_use

    def thinking_settings(self, max_tokens: int | None = None) -> tuple[int | None, dict[str, Any]]:
        """(reasoning budget, template kwargs) of `thinking`; ParamError for an enabled one without a budget."""
        t = self.thinking
        if t is None:
            return thinking_settings(None, None)
        if t.type == "enabled":
            if t.budget_tokens is None:
                raise ParamError("thinking.budget_tokens", 'thinking {"type": "enabled"} needs budget_tokens')
            if max_tokens is not None and t.budget_tokens >= max_tokens:
                raise ParamError("thinking.budget_tokens", f"max_tokens ({max_tokens}) must be greater than "
                                 f"thinking.budget_tokens ({t.budget_tokens})")
        return thinking_settings(t.type == "enabled", t.budget_tokens)


class MessagesRequest(_Conversation):
    """POST /v1/messages."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float = Field(1.0, ge=0.0, le=1.0)   # Anthropic's range
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=0)
    stream: bool = False
    metadata: dict[str, Any] | None = None           # ignored (user_id is never logged)
    service_tier: str | None = None                  # ignored
    output_config: OutputConfig | None = None        # format: structured outputs
    thread: dict[str, Any] | None = None             # refused: ThreadUnsupported
    # haltwise extras
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    timeout: float | None = Field(None, gt=0.0)
    ignore_eos: bool = False
    repetition_detection: RepetitionDetectionSpec | None = None  # as on the OpenAI routes

    def to_turn(self) -> ChatTurn:
        """The chat turn; raises ParamError (400) for anything invalid or unsupported."""
        if self.thread is not None:
            raise ThreadUnsupported("thread", THREADLESS)
        budget, template_kwargs = self.thinking_settings(self.max_tokens)
        params = SamplingParams(
            max_tokens=self.max_tokens, temperature=self.temperature, top_p=self.top_p or 1.0,
            top_k=self.top_k if self.top_k else -1, stop=self.stop_sequences, seed=self.seed,
            timeout=self.timeout, ignore_eos=self.ignore_eos,
            repetition_detection=loop_detection(self.repetition_detection),
            split_reasoning=True, max_reasoning_tokens=budget, structured_outputs=self._structure())
        return ChatTurn(self.chat_messages(), params, self.chat_tools(), self.chat_tool_choice(),
                        self.parallel_tool_calls(), template_kwargs=template_kwargs)

    def _structure(self) -> Any:
        """output_config.format as a structured output (the chat route's json_schema response_format)."""
        config = self.output_config
        if config is not None and config.effort is not None:
            raise ParamError("output_config.effort", "output_config.effort is not supported: the models served "
                             "here have no effort levels (use thinking.budget_tokens)")
        if config is None or config.format is None:
            return None
        js = JsonSchemaFormat(name="output", schema=config.format.schema_, strict=True)
        none = dict.fromkeys(("structured_outputs", "guided_json", "guided_regex", "guided_choice",
                              "guided_grammar", "guided_whitespace_pattern"))
        try:
            return structure_of(SimpleNamespace(response_format=ResponseFormat(type="json_schema", json_schema=js),
                                                **none))
        except ParamError as e:
            raise ParamError("output_config.format", str(e)) from None


class CountTokensRequest(_Conversation):
    """POST /v1/messages/count_tokens: the same conversation, no generation parameters."""
