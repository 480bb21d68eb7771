"""--pin-client: where the load client and the servers go, and that the affinity really reaches them."""
import os
import sys
import threading
from pathlib import Path

import pytest

from haltwise_bench.cpu_pinning import pin_this_process, plan, server_threads
from haltwise_bench.servers import ServerProcess, free_port


def _allowed(status: str) -> str:
    return next(line.split(":")[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list"))


def test_off_by_default_and_said_so_on_a_two_cpu_host():
    p = plan(False, {0, 1})
    assert p.client is None and p.servers is None
    assert "one core per side" in p.note and "off by default" in p.note


def test_pinned_the_client_gets_one_cpu_and_the_servers_the_rest():
    """Named fault: giving the client's CPU to the servers too (servers = all CPUs) or pinning nothing."""
    p = plan(True, {0, 1, 2, 3})
    assert p.client == {3} and p.servers == {0, 1, 2} and not p.client & p.servers
    assert server_threads(p, None) == 3 and server_threads(p, 2) == 2
    two = plan(True, {4, 5})
    assert two.client == {5} and two.servers == {4} and "one core per side" in two.note
    assert plan(True, {0}).client is None and "1" in plan(True, {0}).note


def test_a_server_and_all_its_threads_run_on_its_cpus():
    """Named fault: ServerProcess ignoring its cpus (the server keeps this process's affinity)."""
    cpu = min(os.sched_getaffinity(0))
    port = free_port()
    code = ("import threading, time, http.server; threading.Thread(target=time.sleep, args=(60,), daemon=True).start();"
            f" http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port={port}, bind='127.0.0.1')")
    with ServerProcess([sys.executable, "-c", code], port, "pinned", ready_path="/", start_timeout_s=60,
                       cpus=frozenset({cpu})) as server:
        tasks = list(Path(f"/proc/{server.pid}/task").iterdir())
        assert len(tasks) >= 2
        assert {_allowed((t / "status").read_text()) for t in tasks} == {str(cpu)}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_pinning_this_process_moves_every_thread_and_restores():
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    cpu = max(os.sched_getaffinity(0))
    before = pin_this_process(frozenset({cpu}))
    try:
        statuses = [(t / "status").read_text() for t in Path("/proc/self/task").iterdir()]
        assert {_allowed(s) for s in statuses} == {str(cpu)}
    finally:
        pin_this_process(before)
        stop.set()
    assert os.sched_getaffinity(0) == before
