"""paused_gc: the collector is off inside and back as it was after; building the tiny engine (a path with
no explicit gc.collect()) runs at most the one collection that follows the pause."""
from __future__ import annotations

import gc

import pytest

from haltwise.engine.factory import build_engine
from haltwise.paused_gc import paused_gc


@pytest.fixture()
def collections():
    """(generations of the automatic collections seen while watch[0] is True, watch)."""
    seen: list[int] = []
    watch = [False]

    def record(phase, info):
        if phase == "start" and watch[0]:
            seen.append(info["generation"])

    gc.callbacks.append(record)
    yield seen, watch
    gc.callbacks.remove(record)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_off_inside_and_as_before_after(enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        with paused_gc():
            assert not gc.isenabled()
            with paused_gc():
                assert not gc.isenabled()
            assert not gc.isenabled()      # only the outermost pause turns it back on
        assert gc.isenabled() == enabled
    finally:
        gc.enable()


def test_freeze_takes_what_was_made_out_of_the_collectors_reach():
    before = gc.get_freeze_count()
    try:
        with paused_gc(freeze=True):
            made = [[i] for i in range(1000)]
        assert gc.get_freeze_count() >= before + len(made)
    finally:
        gc.unfreeze()


def test_the_collector_is_back_after_an_exception():
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_an_engine_build_runs_no_collection_of_its_own(collections):
    seen, watch = collections
    assert gc.isenabled()
    watch[0] = True
    build_engine(tiny=True)     # tens of thousands of objects: dozens of collections unpaused
    watch[0] = False
    assert gc.isenabled()
    assert len(seen) <= 1       # the one the first allocation after the pause runs, on what the build counted
