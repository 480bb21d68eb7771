"""Test-only fault injection around the model runner. Off unless HALTWISE_FAULTS is set at start.

HALTWISE_FAULTS is a ';'-separated list of `kind@steps[:arg]` where steps is a ','-separated list of
1-based step numbers or ranges (`3`, `5-7`), counted over steps that run the model:
    raise@3,4,5      the runner raises on steps 3, 4 and 5
    stall@2:30       step 2 sleeps 30 s before running (the watchdog's business)
    hang@2:30        step 2 sleeps 30 s inside its second decoder layer, after the first ran: a kernel
                     that does not return, mid-step
    slow@1-9:0.5     each decoder layer of steps 1..9 takes 0.5 s longer: a slow step that computes
    heavy@1-9:0.001  each decoder layer of steps 1..9 takes 1 ms longer per token of the step: a step's
                     cost that grows with its tokens, as a big model's does
    nan@4            step 4 returns NaN logits
The layer faults act on the Python layer path (the tiny test model's); the native stack has no hooks.
Never set it in production: it exists so the resilience tests can drive the real server.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

ENV_VAR = "HALTWISE_FAULTS"
KINDS = ("raise", "stall", "nan", "hang", "slow", "heavy")


class InjectedFault(RuntimeError):
    """Raised by a `raise` fault."""


@dataclass(frozen=True)
class Fault:
    kind: str            # one of KINDS
    steps: frozenset[int]
    arg: float = 0.0


def parse_faults(spec: str) -> list[Fault]:
    faults = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        kind, _, rest = part.partition("@")
        steps_text, _, arg = rest.partition(":")
        steps: set[int] = set()
        for item in steps_text.split(","):
            lo, _, hi = item.partition("-")
            steps.update(range(int(lo), int(hi or lo) + 1))
        if kind not in KINDS:
            raise ValueError(f"{ENV_VAR}: unknown fault kind {kind!r}")
        faults.append(Fault(kind, frozenset(steps), float(arg or 0)))
    return faults


class FaultyRunner:
    """Wraps a ModelRunner; applies the configured faults on the chosen steps."""

    def __init__(self, runner, faults: list[Fault]):
        self.runner = runner
        self.faults = faults
        self.step = 0
        self._active: dict[str, Fault] = {}
        self._tokens = 0                   # tokens of the step in flight
        layers = getattr(getattr(runner.model, "model", None), "layers", None)
        if any(f.kind in ("hang", "slow", "heavy") for f in faults):
            assert layers is not None and len(layers) >= 2, "layer faults need a model with decoder layers"
            for i, layer in enumerate(layers):
                layer.register_forward_pre_hook(lambda module, args, i=i: self._in_layer(i))

    def _in_layer(self, index: int) -> None:
        active = self._active
        if "hang" in active and index == 1:
            time.sleep(active["hang"].arg)
        if "slow" in active:
            time.sleep(active["slow"].arg)
        if "heavy" in active:
            time.sleep(active["heavy"].arg * self._tokens)

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def execute(self, rows):
        self.step += 1
        active = {f.kind: f for f in self.faults if self.step in f.steps}
        if "stall" in active:
            time.sleep(active["stall"].arg)
        if "raise" in active:
            raise InjectedFault(f"injected failure at step {self.step}")
        self._active, self._tokens = active, sum(r.end - r.start + len(r.draft_token_ids) for r in rows)
        try:
            logits = self.runner.execute(rows)
        finally:
            self._active = {}
        if "nan" in active:
            logits = torch.full_like(logits, float("nan"))
        return logits


def maybe_wrap(runner):
    spec = os.environ.get(ENV_VAR, "")
    return FaultyRunner(runner, parse_faults(spec)) if spec else runner
