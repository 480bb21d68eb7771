"""Where `bench peers --pin-client` puts its load client and the servers it measures.

The load client (this process: asyncio streams, SSE parsing) uses CPU while the servers decode. Unpinned,
the kernel schedules it on whichever core is free, and it steals a slice from the server's decode
threads at every token. Pinned, it gets one CPU of its own (the last one this process may run on) and
the servers get the others, so the client's work never lands on a server core.

The cost is a core: on a 2-CPU host pinning leaves one core per side, so a server that decodes with two
threads on two cores would run on one. That is why pinning is off by default, and the output says so on
such a host; where the host has a spare CPU (more CPUs than the servers' threads), pinning costs nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pinning:
    """CPU sets for the load client and the servers; None: not pinned (inherited affinity)."""

    client: frozenset[int] | None
    servers: frozenset[int] | None
    note: str                          # one line for the output: what was done and why


def plan(pin: bool, cpus: set[int] | frozenset[int] | None = None) -> Pinning:
    """The pinning for --pin-client = `pin` on a host whose usable CPUs are `cpus` (default: this process's)."""
    usable = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if not pin:
        if len(usable) == 2:
            return Pinning(None, None, "load client not pinned: on this 2-CPU host --pin-client would leave one "
                                       "core per side, so it is off by default")
        return Pinning(None, None, "load client not pinned (--pin-client: a CPU of its own, the servers the rest)")
    if len(usable) < 2:
        return Pinning(None, None, "load client not pinned: --pin-client needs at least 2 CPUs, this host has 1")
    client, servers = frozenset(usable[-1:]), frozenset(usable[:-1])
    rest = ",".join(map(str, usable[:-1]))
    note = f"load client pinned to CPU {usable[-1]}, servers to CPUs {rest}"
    if len(usable) == 2:
        note += " (2-CPU host: one core per side)"
    return Pinning(client, servers, note)


def server_threads(pinning: Pinning, threads: int | None) -> int:
    """The thread count both servers get: --threads, else one per CPU the servers may use."""
    if threads:
        return threads
    return len(pinning.servers) if pinning.servers else len(os.sched_getaffinity(0))


def pin_this_process(cpus: frozenset[int]) -> frozenset[int]:
    """Move every thread of this process onto `cpus`; returns the affinity it had (to restore with this)."""
    before = frozenset(os.sched_getaffinity(0))
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):   # a thread that ended meanwhile
            pass
    return before

