"""Every built-in format agrees with float32 within its tolerance wherever this host runs it.

A format the host cannot run is skipped with the reason the format itself gives (e.g. oneDNN's bf16
reorder on a CPU without AVX512-BW/VL/DQ or AVX-NE-CONVERT); nothing assumes an ISA.
"""
import pytest
import torch

from haltwise.kernels import formats as registry
from haltwise.kernels.formats import LinearSource, Unsupported
from haltwise.kernels.host import probe
from haltwise.kernels.plan import check
from tests.kernels.conftest import dense_weight, grid_weight

BUILTIN = ["float32", "bf16", "bf16-onednn", "int8-wo", "int8-wo-bf16", "int4-wo", "int4-wo-bf16"]


def prepared_or_skip(fmt, source):
    why = fmt.unavailable(probe())
    if why:
        pytest.skip(f"{fmt.name} unavailable on this host: {why}")
    try:
        return fmt.prepare(source)
    except Unsupported:
        raise
    except Exception as e:                      # the host's torch cannot run it: what the plan excludes
        pytest.skip(f"{fmt.name} cannot run on this host: {type(e).__name__}: {str(e)[:120]}")


def test_builtin_formats_are_registered_in_order():
    names = [f.name for f in registry.all_formats()]
    assert names[:len(BUILTIN)] == BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("make_weight", [grid_weight, dense_weight])
def test_format_matches_float32_within_its_tolerance(name, make_weight):
    fmt = registry.get(name)
    source = LinearSource("layer", make_weight())
    if name.startswith("int4") and make_weight is dense_weight:
        with pytest.raises(Unsupported, match="4-bit grid"):
            fmt.prepare(source)
        return
    prepared = prepared_or_skip(fmt, source)
    assert check(fmt, prepared, source) is None
    for rows in (1, 5, 64, 300):
        x = torch.randn(rows, 64)
        y = fmt.run(prepared, x)
        assert y.shape == (rows, 96) and y.dtype == torch.float32


def test_float32_is_exact_and_int4_holds_the_grid_values():
    source = LinearSource("layer", grid_weight())
    x = torch.randn(7, 64)
    f32 = registry.get("float32")
    assert f32.exact and torch.equal(f32.run(f32.prepare(source), x), torch.nn.functional.linear(x, source.weight))
    int4 = registry.get("int4-wo")
    back = int4.run(int4.prepare(source), torch.eye(64)).t()       # the int4 copy, read through the kernel
    assert (back - source.weight).abs().max() < 1e-5


def test_group_key_tells_grid_from_dense_weights():
    assert LinearSource("a", grid_weight()).group_key() == "96x64:grid4"
    assert LinearSource("b", dense_weight()).group_key() == "96x64:dense"
    assert LinearSource("c", dense_weight(), max_rows=64).group_key() == "96x64:dense:rows<=64"


def test_registry_version_changes_with_the_formats():
    formats = registry.all_formats()
    assert registry.registry_version(formats) != registry.registry_version(formats[:-1])
