"""Which output rows of a linear are held to a float32 reference (the plan's check, verification).

Dequantizing a whole large weight to float32 and multiplying by it costs more than running the kernel
being checked; the rows chosen here cover every place a kernel's output can go wrong by position.
"""
from __future__ import annotations

import torch

# Of a large linear only some output rows are held to the float32 reference (their weights dequantized,
# their products computed): the first and last EDGE_ROWS (the kernels' head and tail tiles) and an evenly
# strided sample between them, about CHECK_WEIGHTS weights in all. Every output row runs the same kernel code
# on its own weights; what differs by position is where a tile or a thread's chunk starts and ends, and an odd
# stride meets every residue of the 8/16/32/64-row tiles. The kernel's whole output is still checked finite
# and, for a batch-invariant format, bit-equal across buckets. The 1.5B's first start spent 10 of its 22 s
# dequantizing and multiplying whole float32 references; this checks ~1/5 of its weights. The plan's own
# `check` (kernels/plan.py) holds a format to float32 on the same rows (the lm_head's whole reference was
# ~1.2 s of a 9 s first start).
CHECK_WEIGHTS = 2 ** 21
EDGE_ROWS = 32


def checked_rows(out_features: int, in_features: int) -> torch.Tensor:
    """The output rows of a (out_features, in_features) linear whose values verification checks, ascending."""
    want = max(CHECK_WEIGHTS // in_features, 4 * EDGE_ROWS)
    if want >= out_features:
        return torch.arange(out_features)
    stride = (out_features - 2 * EDGE_ROWS) // (want - 2 * EDGE_ROWS)
    stride += 1 - stride % 2                                             # odd: every tile residue is met
    return torch.cat([torch.arange(EDGE_ROWS), torch.arange(EDGE_ROWS, out_features - EDGE_ROWS, stride),
                      torch.arange(out_features - EDGE_ROWS, out_features)])
