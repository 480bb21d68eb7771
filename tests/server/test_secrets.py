"""Issue 27: where the API key comes from (server/secrets.py), what serve refuses at start, and
--protect-metrics. Key sources are checked against `haltwise serve --tiny` as a real subprocess."""
from __future__ import annotations

import argparse
import logging

import httpx
import pytest

from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, tiny_engine
from tests.server.serve_process import ServeProcess, run_serve

ONE = {"prompt": "hi", "max_tokens": 1}


def _authorized(url: str, key: str | None) -> int:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{url}/v1/completions", json=ONE, headers=headers, timeout=60).status_code


def test_the_key_comes_from_a_file_and_is_never_printed(tmp_path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    key_file.chmod(0o600)
    with ServeProcess(["--api-key-file", str(key_file)]) as s:
        assert _authorized(s.url, None) == 401 and _authorized(s.url, "from-file") == 200
    assert "from-file" not in s.output()


def test_the_key_sources_in_order() -> None:
    """The flag, else the file, else $HALTWISE_API_KEY (whitespace stripped); none set: no key."""
    from haltwise.server.secrets import resolve_api_key

    assert resolve_api_key(_args(), environ={}) is None
    assert resolve_api_key(_args(), environ={"HALTWISE_API_KEY": " from-env\n"}) == "from-env"
    assert resolve_api_key(_args(api_key="flag"), environ={"HALTWISE_API_KEY": "env"}) == "flag"


@pytest.mark.parametrize("args,env", [(["--api-key", ""], {}), ([], {"HALTWISE_API_KEY": " "}),
                                      (["--api-key-file", "EMPTY"], {})], ids=["flag", "env", "file"])
def test_an_empty_key_is_refused_at_start(tmp_path, args, env) -> None:
    """`--api-key ""` used to start a keyless server silently."""
    empty = tmp_path / "empty"
    empty.write_text("\n")
    done = run_serve([str(empty) if a == "EMPTY" else a for a in args], env=env)
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], done.stderr[-500:])
    assert "empty" in done.stderr and "disable authentication" in done.stderr


def test_protect_metrics_without_a_key_is_refused_at_start() -> None:
    done = run_serve(["--protect-metrics"])
    assert done.returncode == 2 and "--protect-metrics needs an API key" in done.stderr


def test_an_unreadable_key_file_and_two_key_sources_are_refused(tmp_path) -> None:
    from haltwise.server.secrets import KeySourceError, resolve_api_key

    with pytest.raises(KeySourceError, match="cannot read the API key file"):
        resolve_api_key(_args(api_key_file=str(tmp_path / "missing")), environ={})
    with pytest.raises(KeySourceError, match="not both"):
        resolve_api_key(_args(api_key="a", api_key_file=str(tmp_path / "k")), environ={})


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"api_key": None, "api_key_file": None, **kw})


def test_a_warning_when_serving_beyond_loopback_without_a_key(caplog) -> None:
    from haltwise.server.secrets import check_exposure, resolve_api_key

    with caplog.at_level(logging.WARNING, logger="haltwise.server"):
        check_exposure("0.0.0.0", None, False)
        assert "without an API key" in caplog.text
        caplog.clear()
        check_exposure("127.0.0.1", None, False)
        check_exposure("0.0.0.0", "k", False)
        assert caplog.text == ""
        assert resolve_api_key(_args(api_key="k"), environ={}) == "k" and "visible to other users" in caplog.text


def test_protect_metrics_puts_metrics_and_cluster_behind_the_key() -> None:
    app = build_app(tiny_engine(), "tiny", api_key="s3cret", protect_metrics=True, ui=False)
    with ServerThread(app) as server:
        for path in ("/metrics", "/cluster"):
            r = httpx.get(server.url + path)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", path
        good = {"authorization": "Bearer s3cret"}
        assert httpx.get(server.url + "/metrics", headers=good).status_code == 200
        assert httpx.get(server.url + "/cluster", headers=good).status_code == 404   # a single engine
        assert httpx.get(server.url + "/health").status_code == 200                  # probes stay open
    with ServerThread(build_app(tiny_engine(), "tiny", api_key="s3cret", ui=False)) as server:
        assert httpx.get(server.url + "/metrics").status_code == 200                 # off by default
