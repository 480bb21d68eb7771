"""haltwise's speculation counters as bench peers reads them: from the exposition the server really renders."""
from types import SimpleNamespace

from haltwise_bench.spec_counters import SpecCounters, parse, scrape
from haltwise_bench.servers import ServerProcess, free_port, haltwise_server_cmd
from haltwise.server.metrics import ServerMetrics


def _rendered(**stats) -> str:
    return ServerMetrics(lambda: SimpleNamespace(**stats)).render().decode()


def test_counters_are_read_from_the_servers_own_exposition():
    """Named fault: drafted and accepted swapped, or the draft model's counters read as the totals: the
    values below are all distinct, so either is caught."""
    text = _rendered(spec_draft_tokens=40, spec_accepted_tokens=30, spec_model_draft_tokens=24,
                     spec_model_accepted_tokens=20)
    assert parse(text) == SpecCounters(drafted=40, accepted=30, model_drafted=24, model_accepted=20)


def test_a_runs_acceptance_is_the_difference_of_two_scrapes():
    before = SpecCounters(10, 5, 0, 0)
    after = SpecCounters(50, 35, 8, 6)
    run = after - before
    assert run == SpecCounters(40, 30, 8, 6) and run.acceptance == 0.75
    assert (before - before).acceptance is None            # nothing drafted: no acceptance, not 0


def test_a_live_server_exports_them():
    port = free_port()
    with ServerProcess(haltwise_server_cmd(port, tiny=True), port, "haltwise-tiny", "/ready") as server:
        counters = scrape(server.base_url)
    assert counters.drafted >= counters.accepted >= 0 and counters.model_drafted >= 0
