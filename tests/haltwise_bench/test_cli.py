"""`haltwise bench` dispatches to its three programs."""
import pytest

from haltwise.cli import build_parser, main


def test_bench_subcommands_parse():
    parser = build_parser()
    args = parser.parse_args(["bench", "engine", "--quick", "--repeats", "2", "--json", "x.json",
                              "--dtype", "bfloat16"])
    assert (args.bench, args.quick, args.repeats, args.json, args.dtype) == ("engine", True, 2, "x.json", "bfloat16")
    args = parser.parse_args(["bench", "peers", "--concurrency", "1", "8", "--png", "p.png"])
    assert args.concurrency == [1, 8] and args.png == "p.png"
    args = parser.parse_args(["bench", "stops", "--tokens", "10"])
    assert args.argv == ["--tokens", "10"]
    with pytest.raises(SystemExit):
        parser.parse_args(["bench"])


def test_bench_stops_delegates_to_stop_cost(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["bench", "stops", "--tokens", "200", "--stops", "4", "--repeats", "1", "--json", str(out)]) == 0
    assert out.read_text().strip().startswith("{")
