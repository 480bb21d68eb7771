"""`haltwise bench floor`: the bytes a decode step reads, the bandwidth probe, and a short run end to end."""
from __future__ import annotations

import argparse

import pytest

from haltwise.gguf.file import GGUFFile
from haltwise.models.catalog import resolve_model
from haltwise_bench import floor


def test_bytes_per_token_count_every_tensor_but_an_untied_embedding(tmp_path):
    path = resolve_model("smollm2-135m", progress=None)           # tied: lm_head reads token_embd
    tensors = {t.name: t.n_bytes for t in GGUFFile(path).tensors}
    assert "output.weight" not in tensors
    assert floor.weight_bytes_per_token(path) == sum(tensors.values())


def test_an_untied_lm_head_leaves_the_embedding_out():
    from haltwise.models.catalog import CATALOG, is_installed

    if not is_installed("qwen2.5-coder-0.5b"):
        pytest.skip("qwen2.5-coder-0.5b is not installed (`make models`)")
    path = resolve_model("qwen2.5-coder-0.5b", progress=None)
    tensors = {t.name: t.n_bytes for t in GGUFFile(path).tensors}
    if "output.weight" not in tensors:
        pytest.skip("this GGUF ties its lm_head")
    assert floor.weight_bytes_per_token(path) == sum(tensors.values()) - tensors["token_embd.weight"]
    assert CATALOG["qwen2.5-coder-0.5b"].size > floor.weight_bytes_per_token(path)


def test_read_bandwidth_is_bytes_over_seconds():
    bw = floor.read_bandwidth(1, gib=1 / 16, repeats=2)
    assert 1e8 < bw < 1e13                                          # 0.1 GB/s .. 10 TB/s: a rate, not a count


@pytest.mark.slow
def test_a_short_run_reports_both_settings(capsys, tmp_path):
    parser = argparse.ArgumentParser()
    floor.add_arguments(parser)
    args = parser.parse_args(["--model", "smollm2-135m", "--max-tokens", "4", "--rounds", "1",
                              "--bandwidth-gib", "0.0625", "--repeats", "1", "--json", str(tmp_path / "f.json")])
    assert floor.run(args) == 0
    out = capsys.readouterr().out
    assert "floor" in out and out.count("%") == 2
    import json

    rows = json.loads((tmp_path / "f.json").read_text())["rows"]
    assert [r["speculation"] for r in rows] == ["off", "on"] and all(r["tok_s"] > 0 for r in rows)
