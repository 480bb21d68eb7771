"""The chat core: one chat turn -> one engine request; its result and its stream in protocol-neutral terms.

Every chat surface is a thin adapter over this module:

    surface request --translate--> ChatTurn (OpenAI-shaped messages + SamplingParams + tools)
    ChatTurn --chat_prompt--> prompt ids (template; user/tool text never becomes control tokens)
    ChatCall: start() -> deltas() | result() -> close()      (close() always runs, from a finally)
    ChatResult / ChatDelta --map--> surface response / events   (termination mapped, never recomputed)

The engine run, the per-request metrics and the JSON log line are the ones the OpenAI routes use
(runner.EngineRun, request_log.RequestRecorder), so a termination is recorded the same on every surface.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from haltwise.outputs import CompletionOutput, RequestOutput
from haltwise.sampling_params import ParamError, SamplingParams
from haltwise.server.api import ServerState, _check_admitting, _check_model, _replica_header, _state
from haltwise.server.chat_prompt import chat_prompt
from haltwise.server.request_log import RequestRecorder
from haltwise.server.responses import raise_if_failed
from haltwise.server.runner import EngineRun
from haltwise.stopping.termination import Termination

TOOLS_NOT_SUPPORTED = ("tools are not supported yet by this server (tool calling is being built: "
                       "haltwise issue 23); send the request without tools, or with tool_choice none")


@dataclass(frozen=True)
class ChatTurn:
    """What every surface translates its request into (OpenAI chat shapes).

    messages: [{role, content, tool_calls?, tool_call_id?}], roles system/user/assistant/tool.
    tools: [{"type": "function", "function": {name, description, parameters}}] or None.
    tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name": ...}} | None.
    template_kwargs: extra chat-template variables (e.g. enable_thinking; server/reasoning_request.py).
    """

    messages: list[dict[str, Any]]
    params: SamplingParams
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
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
    tool_calls: list[dict[str, Any]] | None = None
    reasoning: str = ""
    reasoning_tokens: int = 0

    @property
    def finish_reason(self) -> str | None:
        return "tool_calls" if self.tool_calls else self.termination.finish_reason


@dataclass
class ChatDelta:
    """One stream update: new text (never retracted), then once, at the end, the result.
    Reasoning text always arrives before any answer text of the same update."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI delta.tool_calls entries
    result: ChatResult | None = None


def begin(request: Request, model: str | None) -> ServerState:
    """The common start of a generation route: the model is ours and the server is admitting."""
    st = _state(request)
    _check_model(st, model)
    _check_admitting(st)
    return st


def check_tools(turn: ChatTurn, param: str = "tools") -> ChatTurn:
    """The turn the engine can run. tool_choice none drops the tools (no call can be made); any other
    use of tools is a 400 until the tool-calling machinery (toolcalls/, issue 23) is wired in here:
    its (tools, tool_choice) -> engine params / grammar function replaces the raise, and its parser's
    calls arrive as CompletionOutput.tool_calls / delta_tool_calls (OpenAI shapes), read by result_of
    and ChatCall.deltas."""
    if not turn.tools:
        return turn
    if turn.tool_choice == "none":
        return replace(turn, tools=None, tool_choice=None)
    raise ParamError(param, TOOLS_NOT_SUPPORTED)


def result_of(out: RequestOutput) -> ChatResult:
    """The ChatResult of a finished engine output (error / cancelled raise, as on the OpenAI routes)."""
    raise_if_failed(out)
    o: CompletionOutput = out.outputs[0]
    assert o.termination is not None, "result_of needs a finished output"
    return ChatResult(text=o.text, termination=o.termination, prompt_tokens=len(out.prompt_token_ids),
                      completion_tokens=len(o.token_ids), cached_tokens=out.num_cached_tokens,
                      tool_calls=getattr(o, "tool_calls", None), reasoning=o.reasoning_text,
                      reasoning_tokens=o.num_reasoning_tokens)


class ChatCall:
    """The engine request behind one chat turn (n = 1), recorded like every other generation."""

    def __init__(self, request: Request, rid: str, turn: ChatTurn):
        st = _state(request)
        if turn.params.n != 1:
            raise ParamError("n", "this surface generates one answer per request")
        self.st, self.rid, self.turn = st, rid, check_tools(turn)
        extra = {**self.turn.template_kwargs, **({"tools": self.turn.tools} if self.turn.tools else {})}
        self.prompt_text, self.prompt_ids = chat_prompt(request, self.turn.messages, **extra)
        recorder = RequestRecorder(st.metrics, rid, st.log_content, self.prompt_text)
        self.run = EngineRun(st.engine, request, rid, [self.prompt_ids], self.turn.params, [recorder])
        self.headers: dict[str, str] = {}

    async def start(self) -> None:
        """Validate the structure (400 with param), start the engine request, wait for its first update."""
        compile_structure = getattr(self.st.engine, "compile_structure", None)
        if self.turn.params.structured_outputs is not None and compile_structure is not None:
            await run_in_threadpool(compile_structure, self.turn.params)
        await self.run.start()
        self.headers = _replica_header(self.st.engine, self.run.ids)

    async def result(self) -> ChatResult:
        (out,) = await self.run.collect()
        return result_of(out)

    async def deltas(self) -> AsyncIterator[ChatDelta]:
        """Text deltas in order; the last one carries the result. Raises HaltwiseError / ClientGone."""
        async for _, out in self.run.updates():
            o = out.outputs[0]
            result = result_of(out) if out.finished else None
            calls = list(getattr(o, "delta_tool_calls", None) or [])
            if o.delta_text or o.delta_reasoning_text or calls or result is not None:
                yield ChatDelta(text=o.delta_text, reasoning=o.delta_reasoning_text, tool_calls=calls, result=result)

    async def close(self) -> None:
        await self.run.close()


class CallStream(StreamingResponse):
    """An SSE response that closes its ChatCall however the response ends (even if never iterated)."""

    def __init__(self, content: AsyncIterator[str], call: ChatCall):
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **call.headers})
        self.call = call

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.call.close()
