"""`haltwise bench longprompt` end to end on the default model: the prompt is answered (a first token, no
error) while a decode stream runs beside it, and the row says so."""
from __future__ import annotations

import argparse
import json

import pytest

from haltwise_bench import long_prompt

pytestmark = pytest.mark.slow


def test_a_short_run_answers_the_long_prompt_beside_a_stream(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    long_prompt.add_arguments(parser)
    out = tmp_path / "lp.json"
    args = parser.parse_args(["--model", "smollm2-135m", "--lengths", "600", "--streams", "1",
                              "--json", str(out)])
    assert long_prompt.run(args) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["system"] == "haltwise" and row["error"] is None
    assert row["ttft_s"] is not None and row["prompt_tokens"] == 600 and row["streams_ended"] == 0
    assert row["decode_tokens_during"] > 0
