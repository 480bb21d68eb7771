"""One table: every haltwise termination reason in each surface's words (mapped, never recomputed).

| termination.reason | OpenAI chat finish_reason | Anthropic stop_reason          | Responses status / incomplete_details.reason |
|--------------------|---------------------------|--------------------------------|----------------------------------------------|
| eos                | stop                      | end_turn                       | completed                                    |
| stop_string        | stop                      | stop_sequence (+ stop_sequence)| completed                                    |
| stop_token         | stop                      | stop_sequence (+ token text)   | completed                                    |
| grammar            | stop                      | end_turn                       | completed                                    |
| tool_call          | tool_calls                | tool_use                       | completed (function_call items)              |
| repetition         | stop                      | end_turn                       | completed                                    |
| tool_loop          | stop (tool_calls if calls | end_turn (tool_use if calls    | completed                                    |
|                    | precede the withheld one) | precede the withheld one)      |                                              |
| max_tokens         | length                    | max_tokens                     | incomplete / max_output_tokens               |
| context_limit      | length                    | model_context_window_exceeded  | incomplete / max_output_tokens               |
| timeout            | length                    | max_tokens                     | incomplete / timeout                         |
| error              | error (HTTP 5xx / event)  | error (api_error)              | failed (HTTP 5xx / response.failed)          |
| cancelled          | — (nothing to send)       | error (overloaded_error)       | cancelled (HTTP 503 / response.failed)       |

Decisions:
- A loop cut (repetition) is "complete" on every surface, as on the chat route (SPEC §2: finish_reason
  stop): the rule layer judged the text finished, and a client that reads "truncated" would ask to
  continue a loop. A deadline (timeout) cut the text: Anthropic has no word for it, and max_tokens is
  what its clients read as "cut, may continue"; Responses says incomplete, reason "timeout".
- A withheld repeated call (tool_loop) ends the turn: the model's text before it is the answer, the call
  is never sent, so an agent loop stops instead of running the same call again (docs/structured.md).
- A forced close (a loop inside a JSON value, closed by the server: termination.forced_close) is "length"
  everywhere: the JSON parses and validates, but its last value was cut (docs/structured.md).
- Precedence: whenever the output's own finish_reason is "length" (e.g. a structure cut mid-way by any
  layer, issue 23's contract), the surface says cut (max_tokens / incomplete) whatever the row says.
- The full record rides along as `termination` on each surface's final object, so nothing is lost.
"""
from __future__ import annotations

from dataclasses import dataclass

from haltwise.stopping.termination import Termination


@dataclass(frozen=True)
class SurfaceWords:
    anthropic: str | None          # Anthropic stop_reason (None: an error, not a stop)
    status: str                    # Responses status
    incomplete: str | None = None  # Responses incomplete_details.reason


TABLE: dict[str, SurfaceWords] = {
    "eos": SurfaceWords("end_turn", "completed"),
    "stop_string": SurfaceWords("stop_sequence", "completed"),
    "stop_token": SurfaceWords("stop_sequence", "completed"),
    "grammar": SurfaceWords("end_turn", "completed"),
    "tool_call": SurfaceWords("tool_use", "completed"),
    "repetition": SurfaceWords("end_turn", "completed"),
    "tool_loop": SurfaceWords("end_turn", "completed"),
    "max_tokens": SurfaceWords("max_tokens", "incomplete", "max_output_tokens"),
    "context_limit": SurfaceWords("model_context_window_exceeded", "incomplete", "max_output_tokens"),
    "timeout": SurfaceWords("max_tokens", "incomplete", "timeout"),
    "error": SurfaceWords(None, "failed"),
    "cancelled": SurfaceWords(None, "cancelled"),
}
_CUT = "length"


def words_for(t: Termination, finish_reason: str | None) -> SurfaceWords:
    """The surface words of a termination record; `finish_reason` is the output's own (it may say tool_calls
    or length where the reason alone would not)."""
    if finish_reason == "tool_calls":
        return TABLE["tool_call"]
    row = TABLE[t.reason.value]
    if finish_reason == _CUT and row.status == "completed":
        return SurfaceWords("max_tokens", "incomplete", t.reason.value)
    return row


def stop_sequence_of(t: Termination, token_text: str | None = None) -> str | None:
    """Anthropic's `stop_sequence`: the matched stop string (or the stop token's text), else None."""
    if t.reason.value == "stop_string" and isinstance(t.stop_reason, str):
        return t.stop_reason
    if t.reason.value == "stop_token":
        return token_text
    return None
