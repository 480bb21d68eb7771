"""ServerProcess: a server that dies at start is reported with its log, which is kept."""
import sys
from pathlib import Path

import pytest

from haltwise.bench.servers import ServerProcess, free_port


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
