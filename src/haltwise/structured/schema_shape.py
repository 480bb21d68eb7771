"""Size and nesting bounds for a JSON Schema (or any JSON value), checked without recursion.

Every later step recurses over the schema -- json.dumps, jsonschema's metaschema check, the keyword
walk -- and a deep enough schema (300 nested `items`) overflows Python's stack there (a 500). This walk
is iterative, so it is the one check that cannot overflow; it runs first and its answer becomes a 400.
"""
from __future__ import annotations

from typing import Any

MAX_JSON_DEPTH = 100      # nested objects/arrays; jsonschema's metaschema check overflows near 128
MAX_JSON_NODES = 20_000   # objects, arrays and scalars together


def shape_problem(value: Any) -> str | None:
    """Why `value` is too deep or too big (MAX_JSON_DEPTH, MAX_JSON_NODES), or None if it is within both."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > MAX_JSON_NODES:
            return f"the schema has more than {MAX_JSON_NODES} JSON values"
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > MAX_JSON_DEPTH:
            return f"the schema nests deeper than {MAX_JSON_DEPTH} levels"
        stack.extend((child, depth + 1) for child in children)
    return None
