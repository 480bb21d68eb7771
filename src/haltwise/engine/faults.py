"""Test-only fault injection around the model runner. Off unless HALTWISE_FAULTS is set at start.

HALTWISE_FAULTS is a ';'-separated list of `kind@steps[:arg]` where steps is a ','-separated list of
1-based step numbers or ranges (`3`, `5-7`), counted over steps that run the model:
    raise@3,4,5      the runner raises on steps 3, 4 and 5
    stall@2:30       step 2 sleeps 30 s before running (the watchdog's business)
    nan@4            step 4 returns NaN logits
Never set it in production: it exists so the resilience tests can drive the real server.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

ENV_VAR = "HALTWISE_FAULTS"


class InjectedFault(RuntimeError):
    """Raised by a `raise` fault."""


@dataclass(frozen=True)
class Fault:
    kind: str            # raise | stall | nan
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
        if kind not in ("raise", "stall", "nan"):
            raise ValueError(f"{ENV_VAR}: unknown fault kind {kind!r}")
        faults.append(Fault(kind, frozenset(steps), float(arg or 0)))
    return faults


class FaultyRunner:
    """Wraps a ModelRunner; applies the configured faults on the chosen steps."""

    def __init__(self, runner, faults: list[Fault]):
        self.runner = runner
        self.faults = faults
        self.step = 0

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def execute(self, rows):
        self.step += 1
        active = {f.kind: f for f in self.faults if self.step in f.steps}
        if "stall" in active:
            time.sleep(active["stall"].arg)
        if "raise" in active:
            raise InjectedFault(f"injected failure at step {self.step}")
        logits = self.runner.execute(rows)
        if "nan" in active:
            logits = torch.full_like(logits, float("nan"))
        return logits


def maybe_wrap(runner):
    spec = os.environ.get(ENV_VAR, "")
    return FaultyRunner(runner, parse_faults(spec)) if spec else runner
