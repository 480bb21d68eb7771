"""The structure contract (SPEC §11): "stop" / "tool_calls" means the structure is complete and validates.

Applied once per sequence, in SeqOutputState.finish, after the final text is known:

    structure asked for?  --no-->  termination unchanged
         | yes
    complete, and the final text is all the text the grammar saw?  --yes-->  unchanged (grammar / eos / ...)
         | no: the structure was cut (loop detector, deadline, max_tokens, context window, a stop string
         |     inside it, ...)
    termination.structure_incomplete = True  => finish_reason "length"; the reason still names the layer
    that cut, and the detail says which structure is incomplete.

Cancelled and error endings keep their own finish_reason (None / "error") but get the same note.
Tool calls (params.tool_calls) settle through their own constraint: it parses the text, so it knows
whether a call is open (auto mode: free text outside calls is no structure) and turns complete calls
into reason tool_call (toolcalls/constraint.py).

Loop detectors under a grammar keep cutting (they are not relaxed): a measured choice, see docs/benchmarks.md
"Loop detectors under a grammar" -- a cut structure is reported as "length", never as "stop".
"""
from __future__ import annotations

import dataclasses
from typing import Any

from haltwise.stopping.termination import Termination


def mark_incomplete(term: Termination, what: str) -> Termination:
    """The same ending, flagged: `what` (e.g. "json_schema 'person'") was cut before it closed."""
    if term.structure_incomplete:
        return term
    detail = f"{term.detail}; " if term.detail else ""
    return dataclasses.replace(term, structure_incomplete=True,
                               detail=f"{detail}the {what} is incomplete (cut before it closed)")


def settle(term: Termination, params: Any, matcher: Any, text: str, text_was_cut: bool) -> Termination:
    """The final termination of a sequence under the structure contract (see the module docstring).

    params: its SamplingParams; matcher: its grammar matcher or None; text: the final text;
    text_was_cut: the final text is shorter than the text the matcher consumed (a stop string cut it).
    """
    grammar_closed = matcher is not None and matcher.is_complete and not text_was_cut
    tool_calls = getattr(params, "tool_calls", None)
    if tool_calls is not None:
        return tool_calls.settle(term, text, grammar_closed)
    if matcher is None or grammar_closed:
        return term
    return mark_incomplete(term, matcher.spec.describe())
