"""Formats that fail on purpose: the plan must exclude each, whatever its speed."""
import torch

from haltwise.kernels.formats import LinearFormat, float32_sum_bound


class Raises(LinearFormat):
    name, tolerance = "test-raises", 0.1

    def prepare(self, source):
        raise RuntimeError("this kernel needs an ISA the host lacks")

    def run(self, prepared, x):
        raise AssertionError("never called")


class RaisesAtRun(LinearFormat):
    name, tolerance = "test-raises-at-run", 0.1

    def prepare(self, source):
        return None

    def run(self, prepared, x):
        raise RuntimeError("illegal instruction (simulated)")


class WrongNumbers(LinearFormat):
    """Fast and 10% off: must lose to every correct format."""
    name, tolerance = "test-wrong", 0.05

    def prepare(self, source):
        return source.weight.float() * 1.1

    def run(self, prepared, x):
        return torch.nn.functional.linear(x, prepared)


class NaNs(LinearFormat):
    name, tolerance = "test-nan", 0.5

    def prepare(self, source):
        return source.weight.shape[0]

    def run(self, prepared, x):
        return torch.full((x.shape[0], prepared), float("nan"))


class Unavailable(LinearFormat):
    name, tolerance = "test-unavailable", 0.1

    def unavailable(self, host):
        return "needs the flag no-such-isa"

    def prepare(self, source):
        raise AssertionError("never prepared")

    def run(self, prepared, x):
        raise AssertionError("never called")



class WrongInOneTileRow(LinearFormat):
    """Right everywhere but the 6th row of every 8-row tile past the first 64 (a tile-indexing slip)."""
    name, tolerance, batch_invariant = "test-one-tile-row", 1e-5, True

    def prepare(self, source):
        return source.weight.float()

    def run(self, prepared, x):
        y = torch.nn.functional.linear(x, prepared)
        y[:, 64 + 5::8] *= 1.01
        return y

    def error_bound(self, x, weight, abs_dot):
        return 4 * float32_sum_bound(weight, abs_dot)


BROKEN = [Raises(), RaisesAtRun(), WrongNumbers(), NaNs(), Unavailable()]
