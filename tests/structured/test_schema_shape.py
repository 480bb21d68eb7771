"""structured/schema_shape.py: the iterative bound that runs before anything recurses over a schema."""
from __future__ import annotations

import sys

from haltwise.structured.schema_shape import MAX_JSON_DEPTH, MAX_JSON_NODES, shape_problem


def _chain(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_depth_bound_is_exact() -> None:
    assert shape_problem(_chain(MAX_JSON_DEPTH)) is None
    assert "deeper than" in shape_problem(_chain(MAX_JSON_DEPTH + 1))
    assert shape_problem([[]] * 3) is None and shape_problem(True) is None


def test_node_bound_is_exact() -> None:
    assert shape_problem(list(range(MAX_JSON_NODES - 1))) is None        # the list itself is a node
    assert "more than" in shape_problem(list(range(MAX_JSON_NODES)))


def test_far_deeper_than_the_stack_is_answered_not_overflowed() -> None:
    value: list = []
    for _ in range(sys.getrecursionlimit() * 20):
        value = [value]
    assert "deeper than" in shape_problem(value)
