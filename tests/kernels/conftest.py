"""Kernel tests: plans cache under a per-test directory, never the user's ~/.cache."""
import pytest
import torch

from haltwise.kernels.quant import INT4_GROUP


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTWISE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HALTWISE_PLAN_CACHE", raising=False)


def grid_weight(rows: int = 96, cols: int = 64, seed: int = 1) -> torch.Tensor:
    """What a Q4_1 tensor dequantizes to: d * q + m per group of 32 inputs, q in 0..15 (both ends used)."""
    gen = torch.Generator().manual_seed(seed)
    groups = cols // INT4_GROUP
    q = torch.randint(0, 16, (rows, groups, INT4_GROUP), generator=gen).float()
    q[..., 0], q[..., 1] = 0, 15
    d = torch.rand(rows, groups, 1, generator=gen) * 0.01 + 1e-3
    m = -torch.rand(rows, groups, 1, generator=gen) * 0.05
    return (d * q + m).view(rows, cols)


def dense_weight(rows: int = 96, cols: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.05
