"""`haltwise bench models` runs its sequence on a real `haltwise serve --models-dir`, and says why the router peer
did not run where its llama-server is missing or predates router mode."""
from __future__ import annotations

import argparse
import json
import stat
from pathlib import Path

import pytest

from haltwise_bench import models_bench
from tests.models.real_models import real_model_path


def test_a_missing_or_old_router_is_named(tmp_path: Path) -> None:
    assert "make bench-router-setup" in models_bench.router_missing(tmp_path)
    old = tmp_path / "llama-server"
    old.write_text("#!/bin/sh\necho 'usage: llama-server -m FNAME'\n")
    old.chmod(old.stat().st_mode | stat.S_IEXEC)
    assert "no --models-dir" in models_bench.router_missing(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_sequence_runs_on_haltwise(tmp_path: Path, capsys) -> None:
    real_model_path("gemma3-270m")
    out = tmp_path / "models.json"
    args = argparse.Namespace(models="smollm2-135m,gemma3-270m", kv_cache_memory="64MiB", router_bin=tmp_path,
                              threads=2, json=out)
    assert models_bench.run(args) == 0
    payload = json.loads(out.read_text())
    ours = payload["systems"]["haltwise"]
    assert set(payload["systems"]) == {"haltwise"} and "not run" in payload["peer"]
    switches = [v for k, v in ours.items() if k.startswith("switch_ttft_s")]
    assert len(switches) == 2 and all(v > 0 for v in switches)
    assert ours["loaded_ttft_s[smollm2-135m]"] > 0
