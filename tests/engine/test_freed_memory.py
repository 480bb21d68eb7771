"""Memory a step frees stays with the process: a large tensor freed and allocated again reuses its pages
instead of faulting in new ones (glibc's maps off, its heap top kept)."""
import resource
import sys

import pytest
import torch

from haltwise.engine.freed_memory import keep_freed_memory

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

LOGITS = (32, 262144)     # Gemma 3's logits at 32 rows: 33.5 MB, over glibc's largest mmap threshold


def _minor_faults_of_four_steps() -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        logits = torch.empty(LOGITS)
        logits.fill_(1.0)               # every page written, as the lm_head does
        del logits
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_a_freed_step_sized_tensor_is_reused_not_faulted_in_again():
    assert keep_freed_memory()
    _minor_faults_of_four_steps()                           # the heap grows once
    pages = LOGITS[0] * LOGITS[1] * 4 // 4096
    assert _minor_faults_of_four_steps() < pages // 10      # without it: 4 x ~8,200 faults
