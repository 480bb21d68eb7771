"""Report the default path's (--dtype auto) top-1 agreement with float32 on the converted fixtures (MoE first).

    PYTHONPATH=src:. python tests/models/measure_moe_default_path.py [qwen3moe] [qwen2moe] [phi3] [gemma2] ...

Teacher-forced, as tests/engine/test_default_path_smollm2.py: at every position of the default engine's greedy
output (3 prompts x 32 tokens on the q8_0 GGUF), does float32 given the same prefix pick the same token?
Compared with float32 on the same q8_0 file (the kernels' rounding) and on the f32 file (that plus q8_0's).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from haltwise.engine.factory import build_engine
from haltwise.tools.model_args import add_model_arguments, engine_config_from
from tests.engine.test_default_path_smollm2 import run
from tests.models.converted import fixture
from tests.models.test_converted_families import NEW_TOKENS, prompts


def main(archs: list[str]) -> None:
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    default = engine_config_from(parser.parse_args(["--kv-cache-memory", "64MiB", "--max-model-len", "512"]))
    for arch in archs:
        f = fixture(arch)
        engine = build_engine(f.gguf("q8_0"), default)
        ids = prompts(engine.model_config.vocab_size)
        outs = run(engine, ids, NEW_TOKENS)
        del engine
        prefixes = [p + o[:k] for p, o in zip(ids, outs) for k in range(len(o))]
        expected = [t for o in outs for t in o]
        for name in ("q8_0", "f32"):
            reference = build_engine(f.gguf(name), replace(default, dtype="float32"))
            forced = [o[0] for o in run(reference, prefixes, 1)]
            agree = sum(a == b for a, b in zip(forced, expected)) / len(expected)
            print(f"{arch}: default (auto, q8_0 file) vs float32 on the {name} file: top-1 {agree:.3f} "
                  f"over {len(expected)} tokens")


if __name__ == "__main__":
    main(sys.argv[1:] or ["qwen3moe", "qwen2moe"])
