"""Fair starts: which waiting sequence starts next, so one request cannot hold the engine.

A request of n x prompts sequences queues them all at once. Started first come, first served, a
one-token request arriving behind 512 of them would wait for every one to start (issue 27). Instead:

    next to start = the head (queue order) of the waiting request that has the FEWEST running sequences;
                    ties by queue position

so requests take slots in turn (round-robin), a newcomer with nothing running goes first, and with one
sequence per request this is exactly first come, first served (a preempted sequence, queued at the front,
still restarts first). When a request with nothing running cannot start (no slot, the watermark, no free
block), it may take the place of the most recently started sequence of the request running the most
sequences, if that request runs at least two: every request runs at least one sequence soon after it
arrives, and no request is ever preempted down to zero by this rule (so the rule cannot ping-pong).

Under --scheduling-policy priority (priority.py) the effective priority comes first: the order is
(effective priority, running sequences, queue position), and displacement never takes a slot from a
more urgent request.
"""
from __future__ import annotations

import heapq
from collections import Counter, deque
from typing import Callable, Iterable

from haltwise.engine.sequence import Sequence


class FairStarts:
    """One step's start order over the waiting queue; told what started and what was preempted."""

    def __init__(self, waiting: Iterable[Sequence], running: Iterable[Sequence],
                 rank: Callable[[Sequence], int] | None = None):
        """rank: a sequence's effective priority (priority.PriorityRank); None = all equal (fcfs)."""
        self.rank = rank or (lambda seq: 0)
        self.running = Counter(seq.request_id for seq in running)   # request id -> running sequences
        self._groups: dict[str, deque[tuple[int, Sequence]]] = {}    # request id -> (queue position, seq)
        for position, seq in enumerate(waiting):
            self._groups.setdefault(seq.request_id, deque()).append((position, seq))
        # (head's rank, running count when pushed, queue position of the request's head, request id); a stale
        # count is corrected when it reaches the top (a preemption lowered it).
        self._heap = [(self.rank(group[0][1]), self.running[rid], group[0][0], rid)
                      for rid, group in self._groups.items()]
        heapq.heapify(self._heap)

    def next(self) -> Sequence | None:
        """The sequence that should start next (not removed until started())."""
        while self._heap:
            rank, count, position, rid = self._heap[0]
            if count != self.running[rid]:
                heapq.heapreplace(self._heap, (rank, self.running[rid], position, rid))
                continue
            return self._groups[rid][0][1]
        return None

    def started(self, seq: Sequence) -> None:
        """seq (the one next() returned) started: its request runs one more."""
        rid = seq.request_id
        group = self._groups[rid]
        group.popleft()
        self.running[rid] += 1
        if group:
            heapq.heapreplace(self._heap, (self.rank(group[0][1]), self.running[rid], group[0][0], rid))
        else:
            heapq.heappop(self._heap)
            del self._groups[rid]

    def victim(self, seq: Sequence, running: list[Sequence]) -> Sequence | None:
        """The running sequence `seq` (whose request runs nothing) may displace, or None.

        running is in start order; the victim is the last one of the request running the most sequences,
        when it runs at least two.
        """
        if self.running[seq.request_id] != 0 or not self.running:
            return None
        rid, count = self.running.most_common(1)[0]
        if count < 2:
            return None
        victim = next(s for s in reversed(running) if s.request_id == rid)
        if self.rank(victim) < self.rank(seq):
            return None                   # never displace a more urgent request
        self.running[rid] -= 1
        return victim

    def preempted(self, seq: Sequence) -> None:
        """seq, running, was preempted by another rule (priority.py): its request runs one fewer."""
        self.running[seq.request_id] -= 1
