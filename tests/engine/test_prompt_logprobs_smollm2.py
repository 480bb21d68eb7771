"""Prompt logprobs on the default serving path (SmolLM2, the CLI's defaults: dtype auto, int8 KV, native
layer stack): a prompt token's logprob is the one reported when the engine generates that token after the
same prefix, exactly: the same batch-invariant kernels compute a position's logits in a prefill chunk and in
a decode step (SPEC §11)."""
from __future__ import annotations

import argparse

import pytest

from haltwise.engine.factory import build_engine
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.tools.model_args import add_model_arguments, engine_config_from
from tests.engine.test_prompt_logprobs import run


@pytest.mark.slow
def test_default_path_prompt_logprobs_equal_generated_ones() -> None:
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    args = parser.parse_args(["--kv-cache-memory", "128MiB"])
    engine = build_engine(args.model, engine_config_from(args))
    prompt = engine.tokenizer.encode("The capital of France is")
    gen = run(engine, prompt, SamplingParams(temperature=0.0, max_tokens=10, logprobs=0, ignore_eos=True,
                                             repetition_detection=RepetitionDetection(enabled=False)), "g")
    tokens = gen.outputs[0].token_ids
    scored = run(engine, prompt + tokens, SamplingParams(max_tokens=0, prompt_logprobs=0), "s")
    got = [lp.logprob for lp in scored.prompt_logprobs[len(prompt):]]
    want = [lp.logprob for lp in gen.outputs[0].logprobs]
    assert [lp.token_id for lp in scored.prompt_logprobs[len(prompt):]] == tokens
    assert got == want                                      # bit for bit
    assert all(lp.rank == 1 for lp in scored.prompt_logprobs[len(prompt):])   # greedy tokens rank first
