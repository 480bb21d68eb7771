"""The chat core: one chat turn -> one engine request; its result and its stream in protocol-neutral terms.

Every chat surface is a thin adapter over this module:

    surface request --translate--> ChatTurn (OpenAI-shaped messages + SamplingParams + tools)
    ChatTurn --answer_prompt--> prompt ids (template; user/tool text never becomes control tokens)
    ChatCall: start() -> deltas() | result() -> close()      (generation.respond drives it)
    ChatResult / ChatDelta --map--> surface response / events   (termination mapped, never recomputed)

The engine run, the per-request metrics and the JSON log line are the ones the OpenAI routes use
(generation.Generation), so a termination is recorded the same on every surface. Imports no surface.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from fastapi import Request

from haltwise.outputs import CompletionOutput, RequestOutput
from haltwise.sampling_params import ParamError, SamplingParams
from haltwise.server.chat_prompt import answer_prompt
from haltwise.server.chat_tools import prepare_chat
from haltwise.server.generation import Generation, raise_if_failed
from haltwise.server.state import Served
from haltwise.stopping.termination import Termination
from haltwise.toolcalls.constraint import ToolCallConstraint
from haltwise.toolcalls.response import ToolDeltaStream, chat_message

@dataclass(frozen=True)
class ChatTurn:
    """What every surface translates its request into (OpenAI chat shapes).

    messages: [{role, content, tool_calls?, tool_call_id?}], roles system/user/assistant/tool.
    tools: [{"type": "function", "function": {name, description, parameters}}] or None.
    tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}} | None.
    parallel_tool_calls: False allows at most one call (None: the default, several).
    template_kwargs: extra chat-template variables (e.g. enable_thinking; server/reasoning_request.py).
    """

    messages: list[dict[str, Any]]
    params: SamplingParams
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChatResult:
    """A finished chat generation. tool_calls: OpenAI `message.tool_calls` dicts, or None.
    reasoning: the think section's text ("" when the model did not reason); completion_tokens counts
    its reasoning_tokens and the tags too."""

    text: str
    termination: Termination
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cached_by_tier: dict[str, int] = field(default_factory=dict)   # {pool, ram, disk} (RequestOutput.cached_by_tier)
    tool_calls: list[dict[str, Any]] | None = None
    reasoning: str = ""
    reasoning_tokens: int = 0
    logprobs: list[Any] | None = None      # the output tokens' TokenLogprobs, when the request asked for them

    @property
    def finish_reason(self) -> str | None:
        cut = self.termination.finish_reason == "length"      # a call parsed from a cut answer is not a finished call
        return "tool_calls" if self.tool_calls and not cut else self.termination.finish_reason


@dataclass
class ChatDelta:
    """One stream update: new text (never retracted), then once, at the end, the result.
    Reasoning text always arrives before any answer text of the same update."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI delta.tool_calls entries
    result: ChatResult | None = None


def result_of(out: RequestOutput, tools: ToolCallConstraint | None = None, rid: str = "") -> ChatResult:
    """The ChatResult of a finished engine output (error / cancelled raise, as on the OpenAI routes).
    With tools, the text is split by the request's call parser into text outside calls and the calls."""
    raise_if_failed(out)
    o: CompletionOutput = out.outputs[0]
    assert o.termination is not None, "result_of needs a finished output"
    text, calls = o.text, None
    if tools is not None:
        message = chat_message(tools, o.text, rid, 0, o.recipient)
        text, calls = message["content"] or "", message.get("tool_calls")
    return ChatResult(text=text, termination=o.termination, prompt_tokens=len(out.prompt_token_ids),
                      completion_tokens=len(o.token_ids), cached_tokens=out.num_cached_tokens,
                      cached_by_tier=out.cached_by_tier, tool_calls=calls,
                      reasoning=o.reasoning_text, reasoning_tokens=o.num_reasoning_tokens, logprobs=o.logprobs)


class ChatCall:
    """The engine request behind one chat turn (n = 1), recorded like every other generation."""

    def __init__(self, served: Served, request: Request, rid: str, turn: ChatTurn):
        if turn.params.n != 1:
            raise ParamError("n", "this surface generates one answer per request")
        self.rid, self.turn = rid, turn
        plan, self.params, messages, template_kwargs = prepare_chat(        # the same tools path as chat
            turn.tools, turn.tool_choice, turn.parallel_tool_calls, turn.messages, turn.params,
            served.tokenizer, served.st.tool_call_parser)
        self.tools = plan.constraint if plan is not None else None          # None: a plain text answer
        self.prompt_text, self.prompt_ids = answer_prompt(served, messages, self.params, self.tools is not None,
                                                      **{**turn.template_kwargs, **template_kwargs})
        self.generation = Generation(served, request, rid, [self.prompt_ids], [self.prompt_text], self.params)

    @property
    def headers(self) -> dict[str, str]:
        return self.generation.headers

    async def prepare(self) -> None:
        """Validate the structure (400 with param); nothing started yet."""
        await self.generation.prepare()

    async def start(self) -> None:
        """Start the engine request, wait for its first update."""
        await self.generation.start()

    async def result(self) -> ChatResult:
        (out,) = await self.generation.run.collect()
        return result_of(out, self.tools, self.rid)

    async def deltas(self) -> AsyncIterator[ChatDelta]:
        """Text and tool-call deltas in order; the last one carries the result. Raises HaltwiseError /
        ClientGone. With tools, a possible call opener is held back until it is known not to be one, so
        no call markup ever reaches a text delta (the parser the non-streamed answer uses)."""
        stream = ToolDeltaStream(self.tools, self.rid, 0) if self.tools is not None else None
        async for _, out in self.generation.run.updates():
            o = out.outputs[0]
            result = result_of(out, self.tools, self.rid) if out.finished else None
            text, calls = o.delta_text, []
            if stream is not None:
                events = stream.feed(o.delta_text, o.recipient) + (stream.finish() if result is not None else [])
                text = "".join(e.get("content") or "" for e in events)
                calls = [c for e in events for c in e.get("tool_calls", ())]
            if text or o.delta_reasoning_text or calls or result is not None:
                yield ChatDelta(text=text, reasoning=o.delta_reasoning_text, tool_calls=calls, result=result)

    async def close(self) -> None:
        await self.generation.close()
