"""Real activations for the kernel plan's verification (kernels/verify.py): each linear's input rows from one
prefill of a calibration text through the Python layers, once the plan has swapped the linears (a mapped
model has no float32 linears to run before that)."""
from __future__ import annotations

import torch
from torch import nn

from haltwise.kernels.planned_linear import PlannedLinear
from haltwise.models.attention import AttentionMetadata

# Plain English prose with digits, punctuation and code: ordinary activations and their outliers.
CALIBRATION_TEXT = (
    "The harbour was quiet at dawn. A young sailor counted 17 crates, checked the ropes twice and wrote "
    "in his log: \"Wind NE 12 knots; tide 3.4 m at 06:15.\" Then he asked the captain, 'Do we sail today?' "
    "def total(xs):\n    return sum(x * 2 for x in xs)  # doubled\n{\"name\": \"Tom\", \"age\": 3}")


def capture_inputs(model: nn.Module, token_ids: list[int]) -> dict[str, torch.Tensor]:
    """{linear name: (T, in) float32 input rows} from one prefill of token_ids (Python layers, planned linears)."""
    config, block = model.config, 16
    T = len(token_ids)
    num_blocks = -(-T // block)
    shape = (num_blocks, block, config.num_kv_heads, config.head_dim)          # one layer's K (and V) cache
    kv = [(torch.zeros(shape), torch.zeros(shape)) for _ in range(config.num_layers)]
    meta = AttentionMetadata(slot_mapping=torch.arange(T), query_start_loc=[0, T], seq_lens=[T],
                             block_tables=torch.arange(num_blocks)[None, :], block_size=block).prepare()
    captured: dict[str, torch.Tensor] = {}
    hooks = [module.register_forward_hook(lambda m, args, out, name=name: captured.__setitem__(
                 name, args[0].detach().reshape(-1, args[0].shape[-1]).float().clone()))
             for name, module in model.named_modules() if isinstance(module, (nn.Linear, PlannedLinear))]
    native, model.model.native_decode = model.model.native_decode, None
    try:
        model(torch.tensor(token_ids), torch.arange(T), kv, meta, torch.arange(T))
    finally:
        model.model.native_decode = native
        for h in hooks:
            h.remove()
    return captured
