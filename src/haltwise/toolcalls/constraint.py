"""The engine-side half of a tool-call request: how a finished sequence's text settles its termination.

Carried in SamplingParams.tool_calls (plain frozen data: it travels to cluster replicas like the rest).
At finish (stopping/structure_contract.py) the final text is parsed with the request's format:

    a call section still open (cut by max_tokens, a loop, a deadline, a stop string ...)
        -> the same reason, structure_incomplete: finish_reason "length", detail "the tool call is incomplete"
    complete calls, ended by the grammar / an end token / a stop token
        -> reason tool_call (business layer), finish_reason "tool_calls", detail names the tools called
    a call whose arguments do not parse or validate (never under the grammar; checked anyway)
        -> structure_incomplete, detail says which call failed
    a repeated call withheld (reason tool_loop, toolcalls/loop_watch.py), or a loop detector firing after
    complete calls (cut after the last one, toolcalls/call_ends.py)
        -> tool_loop; finish_reason "tool_calls" if complete calls precede the cut, else "stop"
    no call (tool_choice auto, the model answered in text and ended)
        -> reason eos: the grammar's end was the model's own end of text
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import jsonschema

from haltwise.stopping.structure_contract import mark_incomplete
from haltwise.stopping.termination import Reason, Termination
from haltwise.toolcalls.call_ends import CallEnds
from haltwise.toolcalls.formats.registry import get_format
from haltwise.toolcalls.loop_watch import ToolLoopWatch
from haltwise.toolcalls.parser import ParseResult, ToolCallParser, parse
from haltwise.toolcalls.spec import ToolSpec

_ENDED_BY_ITSELF = (Reason.GRAMMAR, Reason.EOS, Reason.STOP_TOKEN)


@dataclass(frozen=True)
class ToolCallConstraint:
    format_name: str                  # toolcalls/formats/registry.py
    tools: tuple[ToolSpec, ...]       # the tools a call may name
    mode: str                         # auto | required | named
    answered: frozenset[tuple[str, str]] = frozenset()   # calls the conversation already answered (loop_watch.py)

    def loop_watch(self) -> ToolLoopWatch:
        return ToolLoopWatch(get_format(self.format_name), self.answered)

    def call_ends(self) -> CallEnds:
        return CallEnds(get_format(self.format_name))

    def marker_texts(self) -> tuple[str, ...]:
        """Texts the answer must show even where they are special tokens (formats/base.py)."""
        return get_format(self.format_name).marker_texts

    def parser(self) -> ToolCallParser:
        return ToolCallParser(get_format(self.format_name))

    def parse(self, text: str) -> ParseResult:
        return parse(get_format(self.format_name), text)

    def settle(self, term: Termination, text: str, grammar_closed: bool = True) -> Termination:
        """The termination under the structure contract for tool calls (module docstring).

        grammar_closed: the call grammar reached its end (required / named: the whole answer is the
        structure, so anything short of that -- even a cut between two calls -- is incomplete).
        """
        result = self.parse(text)
        if term.reason is Reason.TOOL_LOOP and not (result.open or result.broken or self.invalid_call(result)):
            return dataclasses.replace(term, tool_calls_made=bool(result.calls))
        if result.open or result.broken or any(not c.complete for c in result.calls):
            return mark_incomplete(term, "tool call")
        if self.mode != "auto" and (not grammar_closed or not result.calls):
            return mark_incomplete(term, "tool call")
        problem = self.invalid_call(result)
        if problem:
            return mark_incomplete(term, f"tool call ({problem})")
        if result.calls and term.reason in _ENDED_BY_ITSELF:
            names = ", ".join(c.name for c in result.calls)
            return dataclasses.replace(term, reason=Reason.TOOL_CALL, stop_reason=None,
                                       detail=f"called {names} ({len(result.calls)} call"
                                              f"{'s' if len(result.calls) > 1 else ''}); {term.detail}")
        if not result.calls and term.reason is Reason.GRAMMAR:
            return dataclasses.replace(term, reason=Reason.EOS, detail=f"the model ended its text without a "
                                       f"tool call ({term.detail})")
        return term

    def invalid_call(self, result: ParseResult) -> str:
        """Why a parsed call does not validate against its tool, or "" when all do."""
        schemas = {t.name: t for t in self.tools}
        for i, call in enumerate(result.calls):
            tool = schemas.get(call.name)
            if tool is None:
                return f"call {i} names an undeclared tool {call.name!r}"
            try:
                jsonschema.validate(json.loads(call.arguments), tool.schema)
            except (ValueError, jsonschema.ValidationError) as e:
                return f"call {i} to {call.name}: {str(e).splitlines()[0]}"
        return ""
