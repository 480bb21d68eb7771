"""The termination record: why a generation ended, in OpenAI, vLLM and haltwise terms."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Layer(str, Enum):
    """The five layers of SPEC §2, strongest guarantee first."""

    SYSTEM = "system"
    ENGINE = "engine"
    BUSINESS = "business"
    RULE = "rule"
    MODEL = "model"


class Reason(str, Enum):
    EOS = "eos"
    STOP_STRING = "stop_string"
    STOP_TOKEN = "stop_token"
    GRAMMAR = "grammar"          # the structure asked for (response_format / structured_outputs) is complete
    TOOL_CALL = "tool_call"      # the output is one or more complete, valid tool calls (toolcalls/)
    TOOL_LOOP = "tool_loop"      # a call already answered (or made in this answer) was withheld, or a loop
                                 # detector fired after complete calls: cut after them (toolcalls/call_ends.py)
    MAX_TOKENS = "max_tokens"
    CONTEXT_LIMIT = "context_limit"
    REPETITION = "repetition"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    ERROR = "error"

    @property
    def layer(self) -> Layer:
        return _LAYER[self]

    @property
    def finish_reason(self) -> str | None:
        """OpenAI finish_reason: complete text is "stop", a cut text is "length"."""
        return _FINISH[self]


_LAYER = {
    Reason.TIMEOUT: Layer.SYSTEM, Reason.CANCELLED: Layer.SYSTEM, Reason.ERROR: Layer.SYSTEM,
    Reason.MAX_TOKENS: Layer.ENGINE, Reason.CONTEXT_LIMIT: Layer.ENGINE,
    Reason.STOP_STRING: Layer.BUSINESS, Reason.STOP_TOKEN: Layer.BUSINESS, Reason.GRAMMAR: Layer.BUSINESS,
    Reason.TOOL_CALL: Layer.BUSINESS, Reason.TOOL_LOOP: Layer.BUSINESS,
    Reason.REPETITION: Layer.RULE,
    Reason.EOS: Layer.MODEL,
}
_FINISH = {
    Reason.TIMEOUT: "length", Reason.CANCELLED: None, Reason.ERROR: "error",
    Reason.MAX_TOKENS: "length", Reason.CONTEXT_LIMIT: "length",
    Reason.STOP_STRING: "stop", Reason.STOP_TOKEN: "stop", Reason.GRAMMAR: "stop", Reason.REPETITION: "stop", Reason.EOS: "stop",
    Reason.TOOL_CALL: "tool_calls", Reason.TOOL_LOOP: "stop",
}


@dataclass(frozen=True)
class Termination:
    """Why and where a sequence ended.

    token_index: index (in the output tokens) of the last token that counts, or -1 if none.
    char_offset: length of the returned text where it was cut (the stop string's start, or the end).
    stop_reason: vLLM's field: the matched stop string or stop token id, else None.
    structure_incomplete: a structure (grammar, tool call) was open where the text ended. Invariant
        (SPEC §11): then finish_reason is never "stop" / "tool_calls" but "length" -- the reason still
        names the layer that cut (stopping/structure_contract.py sets it).
    forced_close: the loop detector cut inside a structure and the server wrote its shortest valid
        completion (structured/closing.py): the JSON parses and validates, but its last value is the
        server's, not the model's -- finish_reason "length" (docs/structured.md says why).
    tool_calls_made: tool_loop only: calls before the withheld one are in the answer -> "tool_calls".
    """

    reason: Reason
    detail: str = ""
    token_index: int = -1
    char_offset: int = 0
    stop_reason: str | int | None = None
    structure_incomplete: bool = False
    forced_close: bool = False
    tool_calls_made: bool = False

    @property
    def layer(self) -> Layer:
        return self.reason.layer

    @property
    def finish_reason(self) -> str | None:
        finish = self.reason.finish_reason
        if (self.structure_incomplete or self.forced_close) and finish in ("stop", "tool_calls"):
            return "length"
        if self.tool_calls_made and finish == "stop":
            return "tool_calls"
        return finish

    def to_dict(self) -> dict:
        return {"reason": self.reason.value, "layer": self.layer.value, "detail": self.detail,
                "token_index": self.token_index, "char_offset": self.char_offset}
