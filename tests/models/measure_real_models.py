"""Load time, decode tok/s and peak RSS of a real model, in-process, float32 (one model per process).

    PYTHONPATH=src:. python tests/models/measure_real_models.py gemma3-270m [--no-cache]
"""
from __future__ import annotations

import os
import resource
import sys
import time

import torch


def main(name: str, use_cache: bool) -> None:
    if not use_cache:
        os.environ["HALTWISE_WEIGHT_CACHE"] = "0"
    from haltwise.models.loader import load_model
    from tests.models.paged_runner import PagedRunner
    from tests.models.real_models import real_model_path

    path = real_model_path(name)
    start = time.perf_counter()
    loaded = load_model(path, max_model_len=2048)
    load_s = time.perf_counter() - start
    runner = PagedRunner(loaded.model, 1, 256)
    prompt = [2, 651, 6037, 576, 6081, 603] if "gemma" in name else [785, 6722, 315, 9625, 374]
    token = int(runner.step([0], [prompt], [0])[0].argmax())
    steps = []
    for i in range(64):
        t = time.perf_counter()
        token = int(runner.step([0], [[token]], [len(prompt) + i])[0].argmax())
        steps.append(time.perf_counter() - t)
    steps.sort()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{name}: load {load_s:.1f} s ({'weight cache' if use_cache else 'no cache'}), decode median "
          f"{1 / steps[len(steps) // 2]:.1f} tok/s (best {1 / steps[0]:.1f}), peak RSS {rss:.0f} MiB, "
          f"threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main(sys.argv[1], "--no-cache" not in sys.argv)
