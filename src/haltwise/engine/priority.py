"""Priority scheduling (--scheduling-policy priority): lower `priority` sooner, aged so nothing starves.

    effective priority = priority - (steps since the sequence was queued) // aging_steps

Starts go by effective priority (then per-client fairness, then queue position: fairness.py), running
sequences are ordered by it (so a step short of blocks preempts the least urgent one), and a waiting
sequence that cannot start may preempt a running one of strictly worse effective priority.

Anti-starvation rule: the clock is the engine's step count, from the step a sequence was first queued
(preemption does not reset it), so a request of priority p that has been in the engine for
(p - q) x aging_steps steps is as urgent as a fresh request of priority q: from then on no request of
priority q or worse arriving later starts before it or preempts it. Every request therefore starts after a
bounded number of steps, and once it is the most aged it runs to its end.
Under "fcfs" every rank is 0 and the scheduler behaves exactly as before (priority must be 0 there).
"""
from __future__ import annotations

from haltwise.engine.sequence import Sequence


class PriorityRank:
    """rank(seq): the effective priority at this step (smaller = more urgent); 0 for all under fcfs."""

    def __init__(self, enabled: bool, aging_steps: int, step: int):
        self.enabled, self.aging_steps, self.step = enabled, aging_steps, step

    def __call__(self, seq: Sequence) -> int:
        if not self.enabled:
            return 0
        return seq.params.priority - (self.step - seq.arrival_step) // self.aging_steps

    def victim(self, seq: Sequence, running: list[Sequence]) -> Sequence | None:
        """The running sequence `seq` may preempt: the least urgent (last among equals), if strictly less
        urgent than seq; else None."""
        if not self.enabled or not running:
            return None
        worst = max(reversed(running), key=self)    # max keeps the first maximal one: the latest started
        return worst if self(worst) > self(seq) else None
