"""`haltwise models`: lists a running server's models with their status; load and unload one."""
from __future__ import annotations

import argparse

from haltwise.server.app import build_app
from haltwise.tools import models
from tests.registry.tiny_models import tiny_registry
from tests.server.http_helpers import ServerThread


def cli(url: str, *argv: str) -> int:
    p = argparse.ArgumentParser()
    models.add_arguments(p)
    return models.run(p.parse_args([*argv, "--url", url, "--api-key", "k"]))


def test_lists_loads_and_unloads(capsys):
    with ServerThread(build_app(None, models=tiny_registry(["a", "b"]), api_key="k")) as s:
        assert cli(s.url) == 0
        rows = capsys.readouterr().out.splitlines()
        assert rows[0].split()[:2] == ["NAME", "STATUS"] and [r.split()[:2] for r in rows[1:]] == [
            ["a", "unloaded"], ["b", "unloaded"]]
        assert cli(s.url, "load", "b") == 0 and '"loaded"' in capsys.readouterr().out
        assert cli(s.url) == 0
        line = [r for r in capsys.readouterr().out.splitlines() if r.startswith("b ")][0]
        assert line.split()[1] == "loaded" and int(line.split()[2]) > 0      # KV tokens
        assert cli(s.url, "unload", "b") == 0 and '"unloaded"' in capsys.readouterr().out
        assert cli(s.url, "load", "zzz") == 1
