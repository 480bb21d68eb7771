"""The shared model flags (tools/model_args.py) as they reach EngineConfig."""
from __future__ import annotations

import argparse

import pytest

from haltwise.tools.model_args import add_model_arguments, engine_config_from


def parse(*argv: str):
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return engine_config_from(parser.parse_args(list(argv)))


def test_speculative_max_batch_default_count_and_none():
    assert parse().speculative_max_batch == 1
    assert parse("--speculative-max-batch", "4").speculative_max_batch == 4
    assert parse("--speculative-max-batch", "none").speculative_max_batch is None


@pytest.mark.parametrize("bad", ["0", "-2", "many"])
def test_speculative_max_batch_refuses_what_is_not_a_count(bad, capsys):
    with pytest.raises(SystemExit):
        parse("--speculative-max-batch", bad)
    assert "--speculative-max-batch" in capsys.readouterr().err
