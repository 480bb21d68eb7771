"""Memory sizes from the command line: units, fractions of RAM, and auto."""
import pytest

from haltwise.memory_size import parse_memory


def test_auto_stays_auto_in_any_case():
    assert parse_memory("auto") == "auto" and parse_memory("AUTO") == "auto"


@pytest.mark.parametrize("text, expected", [("512MiB", 512 * 2**20), ("2GB", 2 * 10**9), ("1.5g", 3 * 2**29),
                                            ("1000000", 1000000), (4096, 4096), ("64k", 65536)])
def test_units_are_binary_or_decimal_as_written(text, expected):
    assert parse_memory(text) == expected


def test_a_fraction_is_a_share_of_the_ram_given():
    assert parse_memory("0.25", total_ram=8 * 2**30) == 2 * 2**30
