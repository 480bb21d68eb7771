"""What structure a request asks for: one constraint (vLLM's `structured_outputs` shape), as plain data.

Exactly one of json / regex / choice / grammar / json_object is set. `param` is where the constraint
came from in the request (e.g. "response_format.json_schema.schema"), so a compile error names it.
Whitespace inside JSON is bounded by default (see BOUNDED_JSON_WHITESPACE); `whitespace_pattern`
replaces that bound, `disable_any_whitespace` forbids whitespace between JSON tokens. `opener` (json_object
only) is not part of the grammar: it adds a line to the chat prompt (structured/opener.py).
"""
from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from typing import Any

from haltwise.structured.schema_shape import shape_problem

MAX_CONSTRAINT_CHARS = 64 * 1024   # schema (as JSON text), regex or grammar; larger is a 400
MAX_CHOICES = 1024
# Between JSON tokens: nothing, one space, or one newline followed by an indent of up to 16 spaces or up to
# 4 tabs -- the pretty-printed JSON the models were trained on (json.dumps(indent=2|4), 2-space `{\n  "a"`
# from SmolLM2 and Qwen2.5) to nesting depth 8 (2-space) / 4 (4-space, tabs); deeper lines keep the
# maximum indent. No blank lines, no tab/space mixes: runs like "\n    \t  \t  \t" were the model
# looping on whitespace. An unbounded [ \t\n]* (opt-out: whitespace_pattern) lets it loop forever.
BOUNDED_JSON_WHITESPACE = r"( |\n {0,16}|\n\t{0,4})?"
FLEXIBLE_JSON_WHITESPACE = r"[ \t\n\r]*"   # the unbounded JSON rule, for `whitespace_pattern` opt-outs
KINDS = ("json", "json_object", "regex", "choice", "grammar")


class StructureError(ValueError):
    """An invalid constraint; `param` names the request field (OpenAI error `param`)."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class StructuredOutputs:
    json: str | dict | None = None          # a JSON Schema, as a dict or its JSON text
    regex: str | None = None                # Rust-regex syntax, matched in full
    choice: tuple[str, ...] | None = None   # the output is exactly one of these strings
    grammar: str | None = None              # llguidance Lark, or GBNF (rules with ::=)
    json_object: bool = False               # any JSON object (response_format json_object)
    whitespace_pattern: str | None = None   # regex for whitespace between JSON tokens
    disable_any_whitespace: bool = False
    opener: bool = True                     # json_object: the hidden "```json" line before the answer (opener.py)
    name: str | None = None                 # json_schema.name, for the termination detail
    param: str = field(default="structured_outputs", compare=False)

    def __post_init__(self) -> None:
        set_ = [k for k in KINDS if getattr(self, k) not in (None, False)]
        if len(set_) != 1:
            raise StructureError(self.param, "structured_outputs needs exactly one of json, json_object, regex, "
                                 f"choice, grammar; got {', '.join(set_) or 'none'}")
        if self.json is not None:
            object.__setattr__(self, "json", _canonical_schema(self.json, self.param))
        if self.regex is not None:
            _need_text(self.regex, self.param, "regex")
        if self.grammar is not None:
            _need_text(self.grammar, self.param, "grammar")
        if self.choice is not None:
            choices = tuple(self.choice) if isinstance(self.choice, (list, tuple)) else None
            if not choices or len(choices) > MAX_CHOICES or not all(isinstance(c, str) and c for c in choices):
                raise StructureError(self.param, f"choice must be a list of 1..{MAX_CHOICES} non-empty strings")
            if sum(len(c) for c in choices) > MAX_CONSTRAINT_CHARS:
                raise StructureError(self.param, f"choices exceed {MAX_CONSTRAINT_CHARS} characters in all")
            object.__setattr__(self, "choice", choices)
        if self.whitespace_pattern is not None:
            _need_text(self.whitespace_pattern, "whitespace_pattern", "whitespace_pattern", limit=256)

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) not in (None, False))

    @property
    def schema(self) -> Any:
        """The JSON Schema this constraint enforces (json and json_object), else None."""
        if self.json_object:
            return {"type": "object"}
        return _json.loads(self.json) if self.json is not None else None

    @property
    def cache_key(self) -> tuple:
        """Everything that changes the compiled grammar (not where it came from, nor its name)."""
        return (self.kind, self.json, self.regex, self.choice, self.grammar, self.whitespace_pattern,
                self.disable_any_whitespace)

    def describe(self) -> str:
        """Names the constraint, for termination details: "json_schema 'person'", "regex", "choice"."""
        if self.kind == "json":
            return f"json_schema {self.name!r}" if self.name else "json_schema"
        if self.kind == "grammar" and self.name:
            return self.name       # e.g. "tool call" (toolcalls/grammar.py names its grammars)
        return self.kind


def _canonical_schema(schema: str | dict, param: str) -> str:
    if isinstance(schema, str):
        if len(schema) > MAX_CONSTRAINT_CHARS:
            raise StructureError(param, f"the schema exceeds {MAX_CONSTRAINT_CHARS} characters")
        try:
            schema = _json.loads(schema)
        except ValueError as e:
            raise StructureError(param, f"the schema is not valid JSON: {e}") from None
        except RecursionError:
            raise StructureError(param, "the schema nests too deeply") from None
    problem = shape_problem(schema)   # before anything that recurses (json.dumps, the schema checks)
    if problem is not None:
        raise StructureError(param, problem)
    if not isinstance(schema, (dict, bool)):
        raise StructureError(param, "a JSON Schema must be an object (or true/false)")
    try:
        text = _json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StructureError(param, f"the schema is not JSON-serialisable: {e}") from None
    if len(text) > MAX_CONSTRAINT_CHARS:
        raise StructureError(param, f"the schema exceeds {MAX_CONSTRAINT_CHARS} characters as JSON")
    return text


def _need_text(value: object, param: str, what: str, limit: int = MAX_CONSTRAINT_CHARS) -> None:
    if not isinstance(value, str):
        raise StructureError(param, f"{what} must be a string")
    if len(value) > limit:
        raise StructureError(param, f"{what} exceeds {limit} characters")
    if what == "grammar" and not value.strip():
        raise StructureError(param, "grammar must not be empty")
