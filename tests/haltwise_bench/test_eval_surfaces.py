"""`haltwise eval-surfaces` checks against a real server on the tiny model: the contract checks that do
not depend on what the model says pass; a server that breaks a contract is reported, not crashed on."""
from haltwise_bench.eval_surfaces import check_server
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, tiny_engine

MODEL_FREE = ("messages max_tokens", "messages error shape",
              "responses stream == non-stream", "responses incomplete (max_output_tokens)", "responses error shape")


def test_contract_checks_pass_on_haltwise_and_every_check_reports() -> None:
    with ServerThread(build_app(tiny_engine(), "tiny")) as server:
        outcomes = check_server(server.url, "tiny")
    assert len(outcomes) == 9
    for name in MODEL_FREE:
        assert outcomes[name] == "pass", (name, outcomes[name])
    assert all(o == "pass" or o.startswith("FAIL: ") for o in outcomes.values())


def test_a_wrong_model_name_fails_every_check_with_its_reason() -> None:
    with ServerThread(build_app(tiny_engine(), "tiny")) as server:
        outcomes = check_server(server.url, "not-the-model")
    generating = [o for name, o in outcomes.items() if "error shape" not in name]
    assert len(generating) == 7 and all(o.startswith("FAIL: NotFoundError") for o in generating), outcomes
