"""The request fields that ask for a structure, and their conversion to one StructuredOutputs.

Three spellings, at most one per request (a second is a 400 naming it):
- OpenAI `response_format`: {"type": "json_object"} or {"type": "json_schema", "json_schema":
  {"name", "description", "schema", "strict"}}. As in OpenAI, a json_schema's root must be an object
  schema. `strict` is accepted either way: haltwise always enforces the whole schema (and refuses a
  schema it could not enforce) -- there is no best-effort mode. {"type": "text"} asks for nothing.
- vLLM `structured_outputs`: exactly one of json | regex | choice | grammar | json_object, plus
  whitespace_pattern and disable_any_whitespace; and haltwise's `opener` (false: no hidden "```json" line
  before a json_object answer, structured/opener.py).
- vLLM's legacy `guided_json | guided_regex | guided_choice | guided_grammar` (+ guided_whitespace_pattern).
The grammar itself is compiled and validated by the engine's backend when the request arrives.
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from haltwise.sampling_params import ParamError
from haltwise.structured.spec import StructuredOutputs, StructureError

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")   # OpenAI's rule for json_schema.name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, populate_by_name=True)


class JsonSchemaFormat(_Strict):
    name: str
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputsSpec(_Strict):
    json_: dict[str, Any] | str | None = Field(None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    whitespace_pattern: str | None = None
    disable_any_whitespace: bool = False
    opener: bool = True


def structure_of(body: Any) -> StructuredOutputs | None:
    """The one structure a generation request asks for, or None; raises ParamError (400)."""
    asked = []
    if body.response_format is not None and body.response_format.type != "text":
        asked.append("response_format")
    if body.structured_outputs is not None:
        asked.append("structured_outputs")
    asked += [f for f in ("guided_json", "guided_regex", "guided_choice", "guided_grammar")
              if getattr(body, f) is not None]
    if body.guided_whitespace_pattern is not None and not any(a.startswith("guided_") for a in asked):
        raise ParamError("guided_whitespace_pattern", "guided_whitespace_pattern needs guided_json")
    if body.response_format is not None and body.response_format.type == "text" \
            and body.response_format.json_schema is not None:
        raise ParamError("response_format.json_schema", "json_schema is only allowed with type 'json_schema'")
    if len(asked) > 1:
        raise ParamError(asked[1], f"give at most one of {', '.join(asked)}: each asks for a structure")
    if not asked:
        return None
    try:
        if asked[0] == "response_format":
            return _from_response_format(body.response_format)
        if asked[0] == "structured_outputs":
            return _from_structured_outputs(body.structured_outputs)
        kind = asked[0].removeprefix("guided_")
        return StructuredOutputs(**{kind: getattr(body, asked[0])}, param=asked[0],
                                 whitespace_pattern=body.guided_whitespace_pattern)
    except StructureError as e:
        raise ParamError(e.param, str(e)) from None


def _from_response_format(rf: ResponseFormat) -> StructuredOutputs:
    if rf.type == "json_object":
        if rf.json_schema is not None:
            raise ParamError("response_format.json_schema", "json_schema is only allowed with type 'json_schema'")
        return StructuredOutputs(json_object=True, param="response_format")
    js = rf.json_schema
    if js is None:
        raise ParamError("response_format.json_schema", "type 'json_schema' needs a json_schema object")
    if not _NAME.match(js.name):
        raise ParamError("response_format.json_schema.name", "name must be 1-64 characters of a-z, A-Z, 0-9, _ or -")
    param = "response_format.json_schema.schema"
    if js.schema_ is None:
        raise ParamError(param, "json_schema needs a schema")
    if js.schema_.get("type") != "object":
        raise ParamError(param, 'the root of a response_format schema must be an object schema ("type": "object")')
    return StructuredOutputs(json=js.schema_, name=js.name, param=param)


def _from_structured_outputs(so: StructuredOutputsSpec) -> StructuredOutputs:
    given = [k for k in ("json", "regex", "choice", "grammar", "json_object")
             if getattr(so, "json_" if k == "json" else k) not in (None, False)]
    if len(given) != 1:
        raise ParamError("structured_outputs", "structured_outputs needs exactly one of json, regex, choice, grammar, "
                         f"json_object; got {', '.join(given) or 'none'}")
    kind = given[0]
    value = so.json_ if kind == "json" else getattr(so, kind)
    if so.disable_any_whitespace and so.whitespace_pattern is not None:
        raise ParamError("structured_outputs.whitespace_pattern", "whitespace_pattern and disable_any_whitespace "
                         "exclude each other")
    return StructuredOutputs(**{kind: value}, whitespace_pattern=so.whitespace_pattern,
                             disable_any_whitespace=so.disable_any_whitespace, opener=so.opener,
                             param=f"structured_outputs.{kind}")
