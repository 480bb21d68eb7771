"""The grammar backend interface: compile a constraint once, then one matcher per sequence.

The engine only ever sees these two types; the sampler only ever sees a bitmask (bitmask.py).
A backend validates at compile time (raising StructureError with the request's `param`) so a bad
constraint is a 400 before the request reaches the scheduler.
"""
from __future__ import annotations

from typing import Protocol

import torch

from haltwise.structured.spec import StructuredOutputs


class Matcher(Protocol):
    """One sequence's position in its grammar. Advanced once per appended output token."""

    spec: StructuredOutputs

    def consume(self, token_id: int) -> bool:
        """Advance by one sampled token; False if the grammar rejects it (the matcher is then in error)."""

    @property
    def is_complete(self) -> bool:
        """The structure is complete and nothing may follow (or an end token closed it)."""

    @property
    def error(self) -> str:
        """Why the matcher failed, or "" if it has not."""


class CompiledGrammar(Protocol):
    spec: StructuredOutputs

    def new_matcher(self) -> Matcher:
        ...


class GrammarBackend(Protocol):
    name: str

    def compile(self, spec: StructuredOutputs) -> CompiledGrammar:
        """Validated and cached by spec.cache_key; raises StructureError."""

    def fill_bitmask(self, matchers: list[Matcher], bitmask: torch.Tensor) -> None:
        """Row i of bitmask ((K, ceil(V/32)) int32, bit j of word w = token 32*w + j) <- matchers[i]'s allowed tokens."""
