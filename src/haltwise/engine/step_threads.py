"""Which threads run an engine step.

Where the native layer stack runs every step (the default path, --dtype auto), the stack's own pool
(kernels/native/csrc/thread_pool.h) runs every layer and the lm_head on the engine's thread count, and a
step's remaining torch ops (embedding rows, the RoPE gather, sampling) run on the stepping thread alone.
A torch op on more than one thread opens an OpenMP region, after which libgomp's workers spin-wait on
the core the pool needs next: with them, 8% of a Gemma 3 step's CPU time went to that spin, and an
in-process greedy decode (Zen 4, 2 cores, same tokens) ran 1.5-1.7x slower at one sequence and 1.1-1.2x
at 32 (docs/kernels.md, "Threads that survive a shared host").

Everywhere else (float32, bfloat16, a stack for decode steps only) torch runs the step on the engine's
threads and the pool follows torch's count.
"""
from __future__ import annotations

import torch

from haltwise.config import EngineConfig
from haltwise.kernels.native import build as native_kernels

TORCH_DEFAULT_THREADS = torch.get_num_threads()   # read before any engine changes it


def engine_threads(config: EngineConfig) -> int:
    """The thread count a step runs on: --threads, else torch's default (the cores)."""
    return config.num_threads or TORCH_DEFAULT_THREADS


def set_step_threads(threads: int, native_every_step: bool) -> None:
    """Give the calling thread's steps `threads` threads: in the native pool alone when the stack runs
    every step, else in torch (the pool then follows torch.get_num_threads())."""
    native = native_kernels.load() if native_every_step else native_kernels.loaded()
    if native_every_step and native is not None:
        native.set_threads(threads)
        torch.set_num_threads(1)
        return
    torch.set_num_threads(threads)
    if native is not None:
        native.set_threads(0)
