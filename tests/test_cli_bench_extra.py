"""The benchmark package stays out of the runtime: the server never imports it, and where the `bench` extra is
missing its commands say how to install it instead of failing with a traceback."""
import ast
import subprocess
import sys
from pathlib import Path

from haltwise.cli import BENCH_HINT, main

SRC = Path(__file__).resolve().parents[1] / "src" / "haltwise"


def test_serving_imports_nothing_of_the_bench_package():
    probe = ("import sys, haltwise.server.serve; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('haltwise_bench', 'matplotlib')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_runtime_module_imports_the_bench_package():
    importers = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "haltwise_bench" for n in names):
                importers.append(str(path.relative_to(SRC)))
    assert importers == []  # cli.py names its modules as strings and imports one only when it is run


def test_a_bench_command_without_the_extra_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: find_spec answers None
    assert main(["bench", "peers", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib not installed" in err and BENCH_HINT in err
    assert "haltwise[bench]" in BENCH_HINT


def test_a_runtime_command_does_not_need_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    try:
        main(["count-tokens", "--help"])
    except SystemExit as done:
        assert done.code == 0
    assert capsys.readouterr().out.startswith("usage: haltwise count-tokens")
