"""What the batch-invariant default costs: decode tok/s of the default path vs --nondeterministic-kernels.

Both engines are built over the same model in one process and timed alternately (median of --repeats),
single stream (128 new tokens) and 32 concurrent requests (64 new tokens each), greedy, eos ignored.
Run: python -m tests.models.measure_determinism_cost [--model M] [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.sampling_params import RepetitionDetection, SamplingParams

PROMPT = "Once upon a time, in a small harbour town, there lived"


def tok_per_s(engine, prompts: list[list[int]], tokens: int) -> float:
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True,
                            repetition_detection=RepetitionDetection(enabled=False))
    for i, p in enumerate(prompts):
        engine.add_request(f"r{i}-{time.monotonic_ns()}", p, params)
    start = time.perf_counter()
    while engine.has_unfinished():
        engine.step()
    return len(prompts) * tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base = EngineConfig(dtype="auto", kv_cache_memory=512 * 2**20, max_model_len=1024, enable_prefix_caching=False)
    engines = {"deterministic (default)": build_engine(args.model, base),
               "nondeterministic (opt-in)": build_engine(args.model, replace(base, batch_invariant=False))}
    prompt = next(iter(engines.values())).tokenizer.encode(PROMPT)
    for name, clients, tokens in (("1 client", 1, 128), ("32 clients", 32, 64)):
        rates: dict[str, list[float]] = {k: [] for k in engines}
        for r in range(args.repeats):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for k in order:
                rates[k].append(tok_per_s(engines[k], [prompt] * clients, tokens))
        med = {k: statistics.median(v) for k, v in rates.items()}
        a, b = med["deterministic (default)"], med["nondeterministic (opt-in)"]
        print(f"{name}: deterministic {a:.1f} tok/s, nondeterministic {b:.1f} tok/s, ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
