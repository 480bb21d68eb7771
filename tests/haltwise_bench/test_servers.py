"""ServerProcess: a server that dies at start is reported with its log, which is kept."""
import sys
from pathlib import Path

import pytest

from haltwise_bench.servers import ServerProcess, free_port


def test_a_server_that_exits_is_reported_with_its_output():
    port = free_port()
    server = ServerProcess([sys.executable, "-c", "print('boom: no model'); raise SystemExit(3)"], port, "broken",
                           start_timeout_s=60)
    with pytest.raises(RuntimeError) as info:
        server.start()
    message = str(info.value)
    assert "exited with 3" in message and "boom: no model" in message
    log = Path(message.split("(log: ")[1].split(")")[0])
    assert log.read_text().startswith("boom")
    log.unlink()


def test_a_clean_stop_removes_the_log():
    port = free_port()
    cmd = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = ServerProcess(cmd, port, "static", ready_path="/", start_timeout_s=60)
    with server:
        log = Path(server._log.name)
        assert log.exists()
    assert not log.exists()
    server.stop()  # idempotent


def test_load_time_and_peak_rss_of_the_server_process():
    # The server allocates and touches 200 MiB before it starts listening: its peak RSS includes them,
    # and its load time includes the delay.
    port = free_port()
    code = ("import time, http.server; b = bytearray(200 * 2**20); time.sleep(0.5); "
            f"http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port={port}, bind='127.0.0.1')")
    with ServerProcess([sys.executable, "-c", code], port, "fat", ready_path="/", start_timeout_s=60) as server:
        assert server.ready_s >= 0.5
        assert server.peak_rss_mib() >= 200
    assert server.peak_rss_mib() is None          # stopped: nothing to read
