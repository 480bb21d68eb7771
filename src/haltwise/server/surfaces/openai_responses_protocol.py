"""OpenAI Responses request bodies (pydantic, HTTP edge only) and their translation to a ChatTurn.

Stateless: nothing is stored, so `store: true`, `previous_response_id`, `conversation` and `background`
are a 400 that says so (send the whole conversation as `input` items instead).
Accepted: model, input (a string, or message / function_call / function_call_output items),
instructions, max_output_tokens, temperature, top_p, tools (type function) + tool_choice,
parallel_tool_calls, text.format (text | json_object | json_schema: the structured-output path), stream,
reasoning.effort (a budget, server/reasoning_request.py; `summary` is accepted, no summaries are written);
ignored: metadata, user, service_tier, prompt_cache_key, safety_identifier, truncation "disabled",
stream_options, `reasoning` input items (earlier turns' reasoning: templates such as Qwen3 drop it anyway).
haltwise extras: seed, timeout, ignore_eos, stop (Responses has no stop sequences), max_reasoning_tokens,
logit_bias (Responses has none; the chat completions semantics: {"token id": bias in [-100, 100]}).

Translation into the OpenAI chat shape:
    instructions                     -> {"role": "system", "content": instructions}
    "text" / message item            -> {"role": user | assistant | system (developer too), "content": text}
    function_call item(s)            -> one assistant message with tool_calls [{id: call_id, function{name, arguments}}]
    function_call_output item        -> {"role": "tool", "tool_call_id": call_id, "content": output}
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from haltwise.sampling_params import ParamError, SamplingParams, parse_logit_bias
from haltwise.server.chat_core import ChatTurn
from haltwise.server.request_fields import MAX_SEED, KeepAlive, RepetitionDetectionSpec, loop_detection
from haltwise.server.reasoning_request import EFFORT_BUDGETS, reasoning_budget, template_kwargs
from haltwise.server.structured_outputs import JsonSchemaFormat, ResponseFormat, structure_of

STATELESS = ("this server is stateless: it stores no responses or conversations ({field} is not supported); "
             "send the whole conversation as `input` items and omit `store` or set it to false")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, populate_by_name=True)


class ContentPart(_Strict):
    type: Literal["input_text", "output_text", "text"]
    text: str
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class MessageItem(_Strict):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(_Strict):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Strict):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class ReasoningItem(_Strict):
    """An earlier turn's reasoning output item, sent back as input: accepted and dropped."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[dict[str, Any]] | None = None
    content: list[dict[str, Any]] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class ReasoningSpec(_Strict):
    effort: Literal[tuple(EFFORT_BUDGETS)] | None = None  # type: ignore[valid-type]
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None   # the older name of summary


class FunctionTool(_Strict):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FormatSpec(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextSpec(_Strict):
    format: FormatSpec | None = None
    verbosity: str | None = None


# `include` values of the Responses API (openai SDK ResponseIncludable). haltwise serves
# message.output_text.logprobs (non-streamed answers); the others name data haltwise has none of (no
# search, computer, code interpreter or image tools; reasoning is returned in the clear, never encrypted),
# so, as the OpenAI API does for a model without them, they are accepted and the data is omitted.
INCLUDABLE = Literal[
    "file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
    "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
    "reasoning.encrypted_content", "message.output_text.logprobs"]
LOGPROBS = "message.output_text.logprobs"


class ResponsesRequest(_Strict):
    """POST /v1/responses."""

    model: str | None = None
    keep_alive: KeepAlive = None      # Ollama's: how long the model stays loaded after this request
    input: str | list[Union[MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)   # None = the rest of the context window
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextSpec | None = None
    stream: bool = False
    include: list[INCLUDABLE] | None = None     # see INCLUDABLE
    top_logprobs: int | None = Field(None, ge=0, le=20)
    # stateful features: refused (see STATELESS)
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    background: bool | None = None
    # accepted and ignored
    metadata: dict[str, str] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    truncation: Literal["disabled"] | None = None
    stream_options: dict[str, Any] | None = None
    reasoning: ReasoningSpec | None = None
    # haltwise extras
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    timeout: float | None = Field(None, gt=0.0)
    ignore_eos: bool = False
    stop: str | list[str] | None = None
    repetition_detection: RepetitionDetectionSpec | None = None  # as on the OpenAI routes
    max_reasoning_tokens: int | None = Field(None, ge=0)
    logit_bias: dict[str, float] | None = None

    def to_turn(self) -> ChatTurn:
        """The chat turn; raises ParamError (400) for anything invalid, stateful or unsupported."""
        for name in ("previous_response_id", "conversation"):
            if getattr(self, name) is not None:
                raise ParamError(name, STATELESS.format(field=name))
        for name in ("store", "background"):
            if getattr(self, name):
                raise ParamError(name, STATELESS.format(field=f"{name}: true"))
        effort = self.reasoning.effort if self.reasoning else None
        params = SamplingParams(
            split_reasoning=True, max_reasoning_tokens=reasoning_budget(effort, self.max_reasoning_tokens),
            max_tokens=self.max_output_tokens, temperature=self.temperature, top_p=self.top_p, seed=self.seed,
            timeout=self.timeout, ignore_eos=self.ignore_eos,
            repetition_detection=loop_detection(self.repetition_detection),
            stop=self.stop,   # SamplingParams normalises (str | list | None -> tuple)
            structured_outputs=self._structure(), logit_bias=parse_logit_bias(self.logit_bias or {}),
            logprobs=(self.top_logprobs or 0) if LOGPROBS in (self.include or ()) else None)
        return ChatTurn(self.chat_messages(), params, self.chat_tools(), self.chat_tool_choice(),
                        self.parallel_tool_calls, template_kwargs=template_kwargs(None, effort))

    def _structure(self) -> Any:
        f = self.text.format if self.text else None
        if f is None or f.type == "text":
            return None
        js = JsonSchemaFormat(name=f.name or "response", description=f.description, schema=f.schema_,
                              strict=f.strict) if f.type == "json_schema" else None
        none = dict.fromkeys(("structured_outputs", "guided_json", "guided_regex", "guided_choice",
                              "guided_grammar", "guided_whitespace_pattern"))
        try:
            return structure_of(SimpleNamespace(response_format=ResponseFormat(type=f.type, json_schema=js), **none))
        except ParamError as e:
            raise ParamError("text.format", str(e)) from None

    def chat_messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.instructions:
            out.append({"role": "system", "content": self.instructions})
        items = [MessageItem(role="user", content=self.input)] if isinstance(self.input, str) else self.input
        for item in items:
            if isinstance(item, MessageItem):
                role = "system" if item.role == "developer" else item.role
                out.append({"role": role, "content": item.text()})
            elif isinstance(item, FunctionCallItem):
                call = {"id": item.call_id, "type": "function",
                        "function": {"name": item.name, "arguments": item.arguments}}
                last = out[-1] if out else None
                if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                    last["tool_calls"].append(call)
                elif last is not None and last["role"] == "assistant":
                    last["tool_calls"] = [call]
                else:
                    out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            elif isinstance(item, ReasoningItem):
                continue
            else:
                output = item.output if isinstance(item.output, str) else "".join(p.text for p in item.output)
                out.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
        if not out:
            raise ParamError("input", "input must not be empty")
        return out

    def chat_tools(self) -> list[dict[str, Any]] | None:
        if not self.tools:
            return None
        # the chat shape a client of /v1/chat/completions would send (strict kept, no empty description): what
        # the template writes for the tools is the same on both routes
        return [{"type": "function", "function": {
            "name": t.name, **({"description": t.description} if t.description is not None else {}),
            "parameters": t.parameters or {"type": "object", "properties": {}},
            **({"strict": t.strict} if t.strict is not None else {})}} for t in self.tools]

    def chat_tool_choice(self) -> str | dict[str, Any] | None:
        c = self.tool_choice
        if isinstance(c, dict):
            if c.get("type") != "function" or not isinstance(c.get("name"), str):
                raise ParamError("tool_choice", 'tool_choice must be none, auto, required or {"type": "function", "name"}')
            if c["name"] not in {t.name for t in self.tools or ()}:
                raise ParamError("tool_choice", f"tool_choice names an undeclared function: {c['name']!r}")
            return {"type": "function", "function": {"name": c["name"]}}
        return c
