"""Every subcommand's --help works: it is the first thing a newcomer types.

Walks the whole parser tree (subcommands of subcommands included, whatever is added later), formats each
help page, and runs `haltwise NAME --help` for every top-level command. A '%' left unescaped in a help
string (argparse formats help text with %) fails here.
"""
import argparse

import pytest

from haltwise.cli import COMMANDS, build_parser, main


def all_parsers(parser: argparse.ArgumentParser, path: str = "haltwise"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from all_parsers(child, f"{path} {name}")


def test_every_help_page_formats():
    pages = dict(all_parsers(build_parser()))
    assert len(pages) > len(COMMANDS)
    for path, parser in pages.items():
        text = parser.format_help()
        assert text.startswith("usage:"), path


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_exits_zero(name, capsys):
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage: haltwise " + name)
