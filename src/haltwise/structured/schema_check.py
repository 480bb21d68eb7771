"""JSON Schema checks that run before a schema is compiled: valid against its metaschema, and every
keyword one that the grammar will actually enforce (or a pure annotation).

JSON Schema lets unknown keywords pass as annotations, so a typo (`maxLenght`) or an OpenAPI-ism
(`nullable`) would silently weaken the schema. haltwise refuses such a schema with a 400 instead.
"""
from __future__ import annotations

from typing import Any, Iterator

import jsonschema

from haltwise.structured.schema_shape import shape_problem
from haltwise.structured.spec import StructureError

MAX_SCHEMA_DEPTH = 64

# Keywords whose meaning llguidance enforces (checked against its docs and by tests/structured).
ENFORCED = frozenset({
    "type", "enum", "const",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "minLength", "maxLength", "pattern", "format",
    "items", "prefixItems", "minItems", "maxItems",
    "properties", "patternProperties", "additionalProperties", "required", "minProperties", "maxProperties",
    "allOf", "anyOf", "oneOf",
    "$ref", "$defs", "definitions",
})
# Keywords that constrain nothing (identification, documentation, annotations).
ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
    "readOnly", "writeOnly", "contentEncoding", "contentMediaType",
})
ALLOWED = ENFORCED | ANNOTATIONS

_MAPS = ("properties", "patternProperties", "$defs", "definitions")   # name -> schema
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")                   # [schema]
_ONE = ("additionalProperties", "items")                              # schema (items may be a list in draft 7)


def check_schema(schema: Any, param: str) -> None:
    """Raise StructureError(param, ...) unless `schema` is a valid schema using only ALLOWED keywords."""
    problem = shape_problem(schema)   # bounded first: the checks below recurse
    if problem is not None:
        raise StructureError(param, problem)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        raise StructureError(param, f"invalid JSON Schema at {where}: {e.message}") from None
    for path, sub in _subschemas(schema, "#", 0, param):
        unknown = sorted(k for k in sub if k not in ALLOWED)
        if unknown:
            raise StructureError(param, f"unsupported JSON Schema keyword {unknown[0]!r} at {path}: it would not be "
                                 "enforced, so the schema is refused rather than silently weakened")


def _subschemas(schema: Any, path: str, depth: int, param: str) -> Iterator[tuple[str, dict]]:
    """Every object-valued (sub)schema with its JSON pointer; boolean schemas have no keywords."""
    if not isinstance(schema, dict):
        return
    if depth > MAX_SCHEMA_DEPTH:
        raise StructureError(param, f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    yield path, schema
    for key in _MAPS:
        for name, sub in (schema.get(key) or {}).items():
            yield from _subschemas(sub, f"{path}/{key}/{name}", depth + 1, param)
    for key in _LISTS:
        for i, sub in enumerate(schema.get(key) or ()):
            yield from _subschemas(sub, f"{path}/{key}/{i}", depth + 1, param)
    for key in _ONE:
        sub = schema.get(key)
        if isinstance(sub, list):
            for i, item in enumerate(sub):
                yield from _subschemas(item, f"{path}/{key}/{i}", depth + 1, param)
        else:
            yield from _subschemas(sub, f"{path}/{key}", depth + 1, param)
