"""OpenAI-compatible request bodies (pydantic, HTTP edge only) and their conversion to SamplingParams.

Per OpenAI field, one of three decisions (docs/openai.md lists them too):
- accepted: model, prompt, messages, max_tokens, max_completion_tokens, temperature, top_p, n, stream,
  stream_options.include_usage, stop, seed, frequency_penalty, presence_penalty, logprobs, top_logprobs,
  echo (with logprobs: the prompt's tokens scored too; max_tokens 0 then scores the prompt only),
  vLLM's prompt_logprobs and priority, logit_bias (token ids checked against the vocabulary, values in [-100, 100]);
  plus the vLLM/haltwise extras below (stop_token_ids ... repetition_detection).
- accepted and ignored: `user`, `store`, `metadata`, `service_tier` -- bookkeeping for OpenAI's platform
  that changes nothing about the generated text; haltwise neither stores nor bills. `user` is not logged.
- rejected with 400 when set to a non-default value: `suffix`, `best_of` != n,
  `functions`, `function_call` (the legacy names of tools),
  `audio`, `modalities`, `prediction`.
Reasoning (chat only, server/reasoning_request.py): `reasoning_effort`, `max_reasoning_tokens` (extension),
`chat_template_kwargs` (vLLM), assistant `reasoning_content` in history (handed to the template).
Tool calling (chat only): `tools`, `tool_choice`, `parallel_tool_calls`, assistant `tool_calls` and `tool`
messages with `tool_call_id` -- validated and planned by haltwise.toolcalls (server/chat_tools.py).
Structured outputs (both routes): `response_format` {type: text | json_object | json_schema}, vLLM's
`structured_outputs` and the legacy `guided_json / guided_regex / guided_choice / guided_grammar`
(+ `guided_whitespace_pattern`); at most one of the three ways per request (see structured_outputs.py).
Unknown fields are rejected (extra="forbid") with a 400 naming the field; types are strict
(no "5" for 5, no 1 for true) and NaN/Infinity are refused.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from pydantic import Field

from haltwise.sampling_params import ParamError, SamplingParams, parse_logit_bias
from haltwise.server.reasoning_request import EFFORT_BUDGETS, reasoning_budget, template_kwargs
from haltwise.server.request_fields import (MAX_N, MAX_SEED, KeepAlive, RepetitionDetectionSpec, Strict,
                                            loop_detection)
from haltwise.server.structured_outputs import ResponseFormat, StructuredOutputsSpec, structure_of
from haltwise.stopping.intent import resolve_auto

__all__ = ["MAX_N", "MAX_SEED", "RepetitionDetectionSpec", "loop_detection", "CompletionRequest",
           "ChatCompletionRequest", "ChatMessage", "TokenizeRequest", "DetokenizeRequest"]


class StreamOptions(Strict):
    include_usage: bool = False          # a final chunk with usage and empty choices
    continuous_usage_stats: bool = False  # accepted (vLLM); usage is sent once, at the end


class _GenerationRequest(Strict):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: str | None = None               # None = the served model
    keep_alive: KeepAlive = None      # Ollama's: how long the model stays loaded after this request
    max_tokens: int | None = Field(None, ge=0)  # None = the rest of the window; 0 only to score a prompt
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    # accepted and ignored (see module docstring)
    user: str | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    logit_bias: dict[str, float] | None = None   # {"token id": bias}; checked in SamplingParams / check_prompt
    # vLLM / haltwise extras
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    top_k: int = Field(-1, ge=-1)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.0, gt=0.0, le=10.0)
    timeout: float | None = Field(None, gt=0.0)      # seconds; None = the server default
    truncate_prompt_tokens: int | None = Field(None, ge=1)
    stop_presets: list[Literal["json", "line", "paragraph", "code_block", "turn", "auto"]] | None = None
    stop_boundary: Literal["prefix", "word"] = "prefix"   # "word": whole-word stop strings
    repetition_detection: RepetitionDetectionSpec | None = None
    # structured outputs (see structured_outputs.py)
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsSpec | None = None
    prompt_logprobs: int | None = Field(None, ge=0, le=20)   # vLLM: logprobs of the prompt tokens (top-k each)
    priority: int = 0                                        # vLLM: lower = sooner (--scheduling-policy priority)
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None

    def sampling_params(self, max_tokens: int | None, logprobs: int | None,
                        prompt_logprobs: int | None = None) -> SamplingParams:
        """Convert to engine params; raises ParamError (400) for any invalid or unsupported value."""
        if prompt_logprobs is None:
            prompt_logprobs = self.prompt_logprobs
        detection = loop_detection(self.repetition_detection)
        return SamplingParams(
            n=self.n, temperature=self.temperature, top_p=self.top_p, top_k=self.top_k, min_p=self.min_p,
            seed=self.seed, repetition_penalty=self.repetition_penalty,
            frequency_penalty=self.frequency_penalty, presence_penalty=self.presence_penalty,
            max_tokens=max_tokens, min_tokens=self.min_tokens,
            stop=self.stop,   # SamplingParams normalises (str | list | None -> tuple)
            stop_token_ids=tuple(self.stop_token_ids or ()), stop_presets=tuple(self.stop_presets or ()),
            stop_boundary=self.stop_boundary,
            include_stop_str_in_output=self.include_stop_str_in_output, ignore_eos=self.ignore_eos,
            skip_special_tokens=self.skip_special_tokens, repetition_detection=detection,
            timeout=self.timeout, logprobs=logprobs, prompt_logprobs=prompt_logprobs, priority=self.priority,
            truncate_prompt_tokens=self.truncate_prompt_tokens,
            structured_outputs=structure_of(self), logit_bias=parse_logit_bias(self.logit_bias or {}),
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_GenerationRequest):
    """POST /v1/completions. `prompt`: a string, a list of strings, token ids, or a list of token-id lists."""

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=20)  # top logprobs per token (OpenAI caps at 5)
    best_of: int | None = Field(None, ge=1)
    suffix: str | None = None

    def to_sampling_params(self) -> SamplingParams:
        if self.suffix:
            raise ParamError("suffix", "suffix (insertion) is not supported by haltwise")
        if self.best_of is not None and self.best_of != self.n:
            raise ParamError("best_of", "best_of is not supported; use n")
        # echo + logprobs: the prompt's tokens come back scored too (the legacy shape lm-evaluation-harness reads)
        scored = [k for k in (self.prompt_logprobs, self.logprobs if self.echo else None) if k is not None]
        if self.max_tokens == 0 and not (self.echo and scored):
            raise ParamError("max_tokens", "max_tokens must be >= 1; 0 (prompt scoring) needs echo with logprobs")
        params = self.sampling_params(self.max_tokens, self.logprobs, max(scored) if scored else None)
        return resolve_auto(params, [p if isinstance(p, str) else None for p in self.prompts()])

    def prompts(self) -> list[str | list[int]]:
        """The prompts as a list: each a string or a token-id list; raises ParamError if any is empty."""
        p = self.prompt
        if isinstance(p, str):
            items: list[str | list[int]] = [p]
        elif p and all(isinstance(x, int) for x in p):
            items = [list(p)]  # type: ignore[arg-type]
        else:
            items = list(p)    # type: ignore[arg-type]
        if not items or any(len(x) == 0 for x in items):
            raise ParamError("prompt", "prompt must not be empty")
        return items


class TextPart(Strict):
    type: Literal["text"]
    text: str


class ChatMessage(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None     # assistant: calls it made (checked by toolcalls/messages.py)
    tool_call_id: str | None = None                    # tool: the call this message answers
    reasoning_content: str | None = None               # assistant: its reasoning (templates such as Qwen3 use it)
    # an answer's own fields, sent back when a client appends the returned message to the history (the openai
    # SDK's helpers do, as their docs show): accepted and not shown to the model, as OpenAI does
    refusal: str | None = None
    annotations: list[Any] | None = None
    audio: dict[str, Any] | None = None
    function_call: dict[str, Any] | None = None
    parsed: Any = None                                 # the openai SDK's parse() result

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatCompletionRequest(_GenerationRequest):
    """POST /v1/chat/completions. Messages go through the model's chat template."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)  # wins over max_tokens when both are given
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    # rejected unless absent (see module docstring)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    prediction: dict[str, Any] | None = None
    # reasoning (server/reasoning_request.py)
    reasoning_effort: Literal[tuple(EFFORT_BUDGETS)] | None = None  # type: ignore[valid-type]
    max_reasoning_tokens: int | None = Field(None, ge=0)
    chat_template_kwargs: dict[str, Any] | None = None

    def to_sampling_params(self) -> SamplingParams:
        for name in ("functions", "function_call", "audio", "modalities", "prediction"):
            if getattr(self, name) is not None:
                raise ParamError(name, f"{name} is not supported by haltwise")
        if self.top_logprobs is not None and not self.logprobs:
            raise ParamError("top_logprobs", "top_logprobs requires logprobs to be true")
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        if max_tokens == 0:
            raise ParamError("max_tokens", "max_tokens must be >= 1 (prompt scoring is on /v1/completions)")
        params = replace(self.sampling_params(max_tokens, logprobs), split_reasoning=True,
                         max_reasoning_tokens=reasoning_budget(self.reasoning_effort, self.max_reasoning_tokens))
        return resolve_auto(params, [self.last_user_text()])

    def template_kwargs(self) -> dict[str, Any]:
        """Extra chat-template variables (chat_template_kwargs, reasoning_effort); ParamError if reserved."""
        return template_kwargs(self.chat_template_kwargs, self.reasoning_effort)

    def last_user_text(self) -> str | None:
        """The last user turn's text (what stop_presets "auto" classifies), None if there is none."""
        users = [m.text() for m in self.messages if m.role == "user"]
        return users[-1] if users else None

    def template_messages(self) -> list[dict[str, Any]]:
        """Messages for the chat template; tool fields kept as given (toolcalls/messages.py checks them)."""
        out = []
        for m in self.messages:
            message: dict[str, Any] = {"role": m.role, "content": m.text()}
            if m.tool_calls:
                message["tool_calls"] = m.tool_calls
                if m.content is None:
                    message["content"] = None
            if m.tool_call_id is not None:
                message["tool_call_id"] = m.tool_call_id
            if m.role == "tool" and m.name:
                message["name"] = m.name
            if m.role == "assistant" and m.reasoning_content is not None:
                message["reasoning_content"] = m.reasoning_content
            out.append(message)
        return out


class TokenizeRequest(Strict):
    """POST /tokenize (vLLM shape): either `prompt` or `messages`."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool | None = None      # default: true for prompt, false for messages
    add_generation_prompt: bool = True


class DetokenizeRequest(Strict):
    """POST /detokenize (vLLM shape)."""

    model: str | None = None
    tokens: list[int]
