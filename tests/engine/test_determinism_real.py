"""Same request, same tokens, on the default path of the real models (SPEC §11).

The engine is built from the CLI's own defaults (whatever `haltwise serve` runs with no flags), and the
test first asserts that this is the fast path: planned formats native where the GGUF has blocks for
them, every step through the native layer stack. Then one greedy request and one seeded sampled request
must give identical token ids alone, again (a prefix-cache hit), beside 1, 3 and 7 other requests,
joining while the others decode (its prefill shares steps with their decodes, in chunks), under a pool
so small that sequences are preempted and recomputed, with one thread, and after a restart that reads
the cached plan. Agreement with float32 greedy is printed (test_default_path_smollm2.py bounds it).
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import pytest
import torch

from haltwise.engine.factory import build_engine
from haltwise.kernels.planned_linear import PlannedLinear
from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.tools.model_args import add_model_arguments, engine_config_from
from tests.models.real_models import real_model_path

TARGET = "Once upon a time, in a small harbour town, there lived"
OTHERS = ["The capital of France is", "def fibonacci(n):", "List three colours:\n1.", "Water boils at",
          "My favourite food is", "In 1492, Columbus", "The quick brown fox"]
NO_LOOPS = RepetitionDetection(enabled=False)


def default_config(*extra: str):
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return engine_config_from(parser.parse_args(["--max-model-len", "512", "--kv-cache-memory", "128MiB", *extra]))


def run(engine, prompts, params, join_after: int = 0):
    """Token ids per prompt; prompts[0] joins after `join_after` steps of the others."""
    first, rest = prompts[0], prompts[1:]
    for i, p in enumerate(rest):
        engine.add_request(f"o{i}", p, params)
    for _ in range(join_after):
        engine.step()
    engine.add_request("t", first, params)
    final = {}
    while engine.has_unfinished():
        for u in engine.step():
            if u.finished:
                final[u.request_id] = list(u.outputs[0].token_ids)
    return [final["t"]] + [final[f"o{i}"] for i in range(len(rest))]


def assert_fast_path(engine):
    layers = [m for m in engine.runner.model.modules() if isinstance(m, PlannedLinear)]
    formats = {f for m in layers for f in m.bucket_formats}
    assert all(len(set(m.bucket_formats)) == 1 for m in layers), "one format per linear"
    assert "gguf-q8-native" in formats and formats <= {"gguf-q8-native", "float32-native"}, formats
    assert engine.runner.model.model.native_decode.every_step
    assert engine.kernel_plan.verified is not None and not engine.kernel_plan.verified.failures


@pytest.mark.slow
@pytest.mark.timeout(2400)     # a first start measures the plan; on a busy 2-core host that alone takes minutes
@pytest.mark.parametrize("name", ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"])   # Q4_1; Q5_0 + Q4_K + Q6_K X8 records
def test_default_path_same_request_same_tokens(name):
    model = None if name == "smollm2-135m" else str(real_model_path(name))
    tokens = 32 if name == "smollm2-135m" else 16
    engine = build_engine(model, default_config())
    assert_fast_path(engine)
    encode = engine.tokenizer.encode
    prompts = [encode(TARGET)] + [encode(p) for p in OTHERS]
    for params in (SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True, repetition_detection=NO_LOOPS),
                   SamplingParams(temperature=0.8, top_p=0.95, seed=1, max_tokens=tokens, ignore_eos=True,
                                  repetition_detection=NO_LOOPS)):
        alone = run(engine, prompts[:1], params)[0]
        assert run(engine, prompts[:1], params)[0] == alone, "a repeat (prefix-cache hit) differs"
        for k in (1, 3, 7):
            assert run(engine, prompts[:1 + k], params)[0] == alone, f"beside {k} others"
        assert run(engine, prompts, params, join_after=3)[0] == alone, "joining beside decoding requests"
    greedy = run(engine, prompts[:1], replace(params, temperature=0.0))[0]
    batched = run(engine, prompts, replace(params, temperature=0.0))

    pool = 10 * 16 * engine.model_config.kv_bytes_per_token(engine.config.kv_dtype)   # 10 blocks for 8 sequences
    small = build_engine(model, default_config("--kv-cache-memory", str(pool), "--max-model-len", "128",
                                               "--max-num-batched-tokens", "48"))
    assert run(small, prompts, replace(params, temperature=0.0)) == batched
    assert small.scheduler.num_preemptions > 0, "the small pool was meant to preempt"
    del small

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert run(engine, prompts[:1], replace(params, temperature=0.0))[0] == greedy, "one thread differs"
    finally:
        torch.set_num_threads(threads)

    restarted = build_engine(model, default_config())
    # a plan timed on a host too busy to trust is not cached (plan.py): then the restart measured again
    assert restarted.kernel_plan.from_cache or engine.kernel_plan.noisy
    if restarted.kernel_plan.chosen() == engine.kernel_plan.chosen():
        assert run(restarted, prompts[:1], replace(params, temperature=0.0))[0] == greedy, "after a restart"
