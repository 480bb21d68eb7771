"""The default serving path (whatever `haltwise serve` builds with no flags) agrees with float32 greedy.

The engine is built from the CLI's own defaults (add_model_arguments + engine_config_from), so this
test follows the default as it changes (today `--dtype auto`: float32 activations, each linear in
its host-measured kernel-plan format, e.g. int8-activation GGUF-block kernels). Agreement is teacher-forced top-1: at every position of the default engine's greedy
output, float32 given the same prefix picks the same token. Floor: 100% where the path is exact
(float32 weights and compute), else >= 90% (bf16 / int4 / int8 rounding flips near-ties only).
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from haltwise.engine.factory import build_engine
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.tools.model_args import add_model_arguments, engine_config_from

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "Water boils at", "List three colours:\n1."]
TOKENS = 24
INEXACT_FLOOR = 0.90


def run(engine, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                            repetition_detection=RepetitionDetection(enabled=False))
    for i, p in enumerate(prompts):
        engine.add_request(f"q{i}", p, params)
    final = {}
    while engine.has_unfinished():
        for u in engine.step():
            if u.finished:
                final[u.request_id] = u.outputs[0].token_ids
    return [final[f"q{i}"] for i in range(len(prompts))]


@pytest.mark.slow
def test_default_serving_path_agrees_with_float32_greedy():
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    args = parser.parse_args(["--kv-cache-memory", "256MiB"])
    default = engine_config_from(args)
    engine = build_engine(args.model, default)
    prompts = [engine.tokenizer.encode(p) for p in PROMPTS]
    outs = run(engine, prompts, TOKENS)
    del engine
    reference = build_engine(args.model, replace(default, dtype="float32"))
    # float32's next token after every prefix of the default output, all at once
    prefixes = [p + out[:k] for p, out in zip(prompts, outs) for k in range(len(out))]
    expected = [tok for out in outs for tok in out]
    forced = [o[0] for o in run(reference, prefixes, 1)]
    agreement = sum(a == b for a, b in zip(forced, expected)) / len(expected)
    exact = default.dtype == "float32"
    floor = 1.0 if exact else INEXACT_FLOOR
    assert agreement >= floor, f"default {default.dtype}: top-1 agreement {agreement:.3f} < {floor}"
