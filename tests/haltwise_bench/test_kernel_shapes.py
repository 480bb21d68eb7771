"""`haltwise bench kernels` on the real SmolLM2 GGUF: every quantized tensor kind is timed in both layouts,
counted, and the shares of the step add up."""
import argparse
import re

from haltwise_bench import kernel_shapes
from haltwise.models.loader import default_model_path


def test_every_tensor_kind_is_timed_in_both_layouts(capsys):
    path = default_model_path()
    sources, counts = kernel_shapes._sources(path)
    assert {s.name for s in sources} == set(counts)
    assert counts["blk.ffn_down.weight:Q4_1"] == 30                     # one per layer
    assert [k for k in counts if k.startswith("token_embd")] == ["token_embd.weight:Q8_0"]   # tied lm_head, once
    assert counts["token_embd.weight:Q8_0"] == 1
    parser = argparse.ArgumentParser()
    kernel_shapes.add_arguments(parser)
    assert kernel_shapes.run(parser.parse_args(["--model", str(path), "--rows", "1,3", "--calls", "2"])) == 0
    out = capsys.readouterr().out
    for name in counts:
        row = next(line for line in out.splitlines() if line.startswith(name))
        assert len(re.findall(r"\(\d+\.\d+x\)", row)) == 2, row        # plain / X8 ratio at 1 and 3 rows
    for rows in (1, 3):
        head = f"share of the step's linear time at {rows} rows"
        line = next(line for line in out.splitlines() if line.startswith(head))
        shares = [int(p) for p in re.findall(r" (\d+)%", line)]
        assert len(shares) == len(counts) and 95 <= sum(shares) <= 105, line


def test_two_isa_paths_are_compared_on_the_x8_records(capsys):
    """--isas A,B: the X8 records timed on each path; a path this CPU cannot run is refused, naming them."""
    from haltwise.kernels.native import build

    isas = build.load().isas()
    parser = argparse.ArgumentParser()
    kernel_shapes.add_arguments(parser)
    path = str(default_model_path())
    pair = f"{isas[0]},{isas[-1]}"
    assert kernel_shapes.run(parser.parse_args(["--model", path, "--rows", "2", "--calls", "2", "--isas", pair])) == 0
    out = capsys.readouterr().out
    assert f"{isas[0]}/{isas[-1]} on" in out and f"X8 on {isas[-1]}" in out
    assert kernel_shapes.run(parser.parse_args(["--model", path, "--isas", "scalar,haltwise_test_isa"])) == 2
    assert "--isas takes two of this CPU's paths: " + ", ".join(isas) in capsys.readouterr().err


def test_from_dram_reads_every_layer_of_each_kind(capsys):
    """--from-dram: one row per tensor kind, counting every layer's tensor, with a rate at each row count."""
    path = default_model_path()
    parser = argparse.ArgumentParser()
    kernel_shapes.add_arguments(parser)
    assert kernel_shapes.run(parser.parse_args(["--model", str(path), "--rows", "1,2", "--calls", "1",
                                                "--from-dram"])) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("blk.ffn_down.weight"))
    tensors, _, one, two = row.split()[1:]
    assert tensors == "30" and float(one) > 0 and float(two) > 0
    embd = next(line for line in out.splitlines() if line.startswith("token_embd"))   # tied: it is the lm_head
    assert embd.split()[1] == "1"
