import math

import pytest

from haltwise.registry.durations import FOREVER, parse_keep_alive


@pytest.mark.parametrize("text, seconds", [("5m", 300), ("30s", 30), ("1h30m", 5400), ("250ms", 0.25), (0, 0),
                                           ("0", 0), (12, 12), (1.5, 1.5), ("-1", FOREVER), (-1, FOREVER)])
def test_durations(text, seconds):
    assert parse_keep_alive(text) == seconds


@pytest.mark.parametrize("bad", ["", "5 minutes", "m", "5x", "nan", True, float("nan")])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_keep_alive(bad)
    assert not math.isnan(FOREVER)
