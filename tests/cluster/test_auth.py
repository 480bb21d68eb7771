"""Ray authentication (cluster/auth.py), without starting a cluster: an inherited RAY_AUTH_MODE=disabled
is refused unless the cluster is loopback-only, the mode is stated, the token file is 0600."""
from __future__ import annotations

import argparse
import logging
import os
import stat
import sys
import types

import pytest

from haltwise.cluster import auth
from haltwise.cluster.auth import ClusterAuthError, resolve_auth


@pytest.mark.parametrize("address", ["10.0.0.5:6379", "ray://node.example:10001", "auto", "0.0.0.0:6379"])
def test_disabled_auth_is_refused_for_a_cluster_that_is_not_loopback_only(address):
    with pytest.raises(ClusterAuthError, match="RAY_AUTH_MODE=disabled.*not loopback-only"):
        resolve_auth(address, {"RAY_AUTH_MODE": "disabled"})


@pytest.mark.parametrize("address", [None, "127.0.0.1:6379", "localhost:6379", "[::1]:6379", "ray://127.0.0.1:10001"])
def test_disabled_auth_is_allowed_on_a_loopback_only_cluster_and_said(address):
    chosen = resolve_auth(address, {"RAY_AUTH_MODE": "Disabled"})
    assert chosen.mode == "disabled" and "DISABLED" in chosen.describe()


def test_token_auth_is_the_default_with_ray_s_token_file(tmp_path):
    chosen = resolve_auth("10.0.0.5:6379", {"RAY_AUTH_TOKEN_PATH": str(tmp_path / "t")})
    assert chosen.mode == "token" and chosen.token_path == tmp_path / "t" and "token file" in chosen.describe()
    assert resolve_auth(None, {"RAY_AUTH_TOKEN": "x"}).token_path is None
    with pytest.raises(ClusterAuthError, match="expected 'token' or 'disabled'"):
        resolve_auth(None, {"RAY_AUTH_MODE": "off"})


def test_a_new_token_file_is_0600_whatever_the_umask(tmp_path):
    path = tmp_path / "ray" / "auth_token"
    old = os.umask(0)
    try:
        auth.secure_token_file(path, create=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(path.read_text()) == 64


def test_a_readable_token_file_is_tightened_with_a_warning_and_joining_never_creates_one(tmp_path, caplog):
    path = tmp_path / "auth_token"
    path.write_text("secret")
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="haltwise.cluster"):
        auth.secure_token_file(path, create=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and "readable by others" in caplog.text
    auth.secure_token_file(tmp_path / "absent", create=False)
    assert not (tmp_path / "absent").exists()


def test_apply_sets_the_mode_for_ray_and_states_it(tmp_path, capsys):
    env: dict[str, str] = {}
    auth.apply(auth.ClusterAuth("token", tmp_path / "tok", True), local=True, env=env)
    assert env["RAY_AUTH_MODE"] == "token" and (tmp_path / "tok").is_file()
    assert "ray auth: token (token file" in capsys.readouterr().out


def test_serve_refuses_before_ray_starts(monkeypatch, capsys):
    """serve_cluster exits 2 for disabled auth on a non-loopback address; a stand-in `ray` module fails the
    test (instead of connecting anywhere) if ray.init is reached."""
    from haltwise.cluster.launch import serve_cluster

    fake = types.ModuleType("ray")
    fake.init = lambda *a, **k: pytest.fail("ray.init was reached with authentication disabled")
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    args = argparse.Namespace(replicas=1, ray_address="10.0.0.5:6379", shutdown_grace=1.0, default_timeout=None,
                              replica_cpus=1.0)
    assert serve_cluster(args, lambda a, e: pytest.fail("served")) == 2
    assert "not loopback-only" in capsys.readouterr().err
