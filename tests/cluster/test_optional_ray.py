"""The single-process server never imports ray: the cluster extra is optional."""
from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import haltwise.cli, haltwise.server.serve, haltwise.server.app, haltwise.server.api
haltwise.cli.build_parser()
loaded = sorted(m for m in sys.modules if m == "ray" or m.startswith(("ray.", "haltwise.cluster")))
assert not loaded, loaded
"""


def test_haltwise_server_imports_no_ray() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
