"""The core the surfaces stand on (state, generation, chat_core) imports no surface and not api.py."""
from __future__ import annotations

import subprocess
import sys


def test_core_imports_no_surface():
    code = ("import sys, haltwise.server.state, haltwise.server.generation, haltwise.server.chat_core\n"
            "print(sorted(m for m in sys.modules if m.startswith('haltwise.server.surfaces') "
            "or m == 'haltwise.server.api'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_every_surface_is_registered():
    from haltwise.server.surfaces import SURFACES
    paths = {route.path for surface in SURFACES for route in surface.routes}
    assert {"/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/responses"} <= paths
