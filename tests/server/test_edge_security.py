"""Issue 27: the keyless loopback default cannot be driven by a web page (server/edge_security.py).

Over a real uvicorn server (tiny model): JSON POSTs need application/json (415), the Host header must be
allowed (400), CORS is off unless origins are listed, the page carries its CSP, /docs is off.
"""
from __future__ import annotations

import json
import socket
from typing import Iterator

import httpx
import pytest

from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, tiny_engine

ONE_TOKEN = {"prompt": "hi", "max_tokens": 1}


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.fixture(scope="module")
def cors_server() -> Iterator[ServerThread]:
    app = build_app(tiny_engine(), "tiny", cors_origins=["https://app.example"],
                    allowed_hosts=["api.example.com", ".corp.example", "ip"])
    with ServerThread(app) as server:
        yield server


# ---- JSON content type only ----------------------------------------------------------------------

@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/jsonx"])
def test_a_post_without_the_json_content_type_is_415(tiny_server, content_type) -> None:
    """What a cross-site "simple" request can send (no preflight): refused before any generation."""
    headers = {"content-type": content_type} if content_type else {}
    for path in ("/v1/completions", "/v1/chat/completions", "/tokenize"):
        r = httpx.post(tiny_server.url + path, content=json.dumps(ONE_TOKEN), headers=headers, timeout=30)
        error = _error(r, 415)
        assert error["code"] == "unsupported_media_type" and "application/json" in error["message"]


def test_json_content_type_with_parameters_is_accepted(tiny_server) -> None:
    r = httpx.post(tiny_server.url + "/v1/completions", content=json.dumps(ONE_TOKEN), timeout=30,
                   headers={"content-type": "Application/JSON; charset=utf-8"})
    assert r.status_code == 200, r.text


# ---- Host allow-list ------------------------------------------------------------------------------

def test_a_foreign_host_is_400_on_every_route(tiny_server) -> None:
    """DNS rebinding: the page's own host name arrives in Host; the loopback default refuses it."""
    for method, path in (("GET", "/v1/models"), ("GET", "/health"), ("GET", "/"), ("POST", "/v1/completions")):
        r = httpx.request(method, tiny_server.url + path, json=ONE_TOKEN, timeout=30,
                          headers={"host": "attacker.example"})
        error = _error(r, 400)
        assert error["code"] == "invalid_host" and "attacker.example" in error["message"]
        assert "--allowed-hosts" in error["message"]


def test_loopback_names_pass_with_or_without_port(tiny_server) -> None:
    port = tiny_server.url.rsplit(":", 1)[1]
    for host in ("localhost", f"localhost:{port}", "127.0.0.1", f"127.0.0.1:{port}", "[::1]", f"[::1]:{port}",
                 "LOCALHOST"):
        assert httpx.get(tiny_server.url + "/v1/models", headers={"host": host}).status_code == 200, host
    for host in ("127.0.0.2", "localhost.attacker.example", "10.0.0.1", "[::1", "localhost:80:80", ""):
        assert httpx.get(tiny_server.url + "/v1/models", headers={"host": host}).status_code == 400, host


def test_a_request_without_host_is_400(tiny_server) -> None:
    port = int(tiny_server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /v1/models HTTP/1.0\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400") and b"invalid_host" in reply


def test_allowed_hosts_list_names_domains_and_ip_literals(cors_server) -> None:
    ok = ("api.example.com", "api.example.com:443", "corp.example", "x.corp.example", "10.1.2.3:8000", "[fe80::1]")
    bad = ("localhost", "example.com", "evilcorp.example", "api.example.com.evil")
    for host in ok:
        assert httpx.get(cors_server.url + "/v1/models", headers={"host": host}).status_code == 200, host
    for host in bad:
        assert httpx.get(cors_server.url + "/v1/models", headers={"host": host}).status_code == 400, host


def test_star_allows_any_host() -> None:
    with ServerThread(build_app(tiny_engine(), "tiny", allowed_hosts=["*"], ui=False)) as server:
        assert httpx.get(server.url + "/v1/models", headers={"host": "anything.example"}).status_code == 200


def test_host_parsing_and_defaults() -> None:
    from haltwise.server.edge_security import (LOOPBACK_HOSTS, default_allowed_hosts, host_allowed, host_name,
                                               is_loopback)

    assert host_name(b"Example.COM:8000") == "example.com" and host_name(b"[::1]:80") == "[::1]"
    assert host_name(b"::1") == "" and host_name(b"[::1]x") == "" and host_name(b"\xff") == ""
    assert not host_allowed("", ["*"]) and host_allowed("a.b.c", [".b.c"]) and not host_allowed("xb.c", [".b.c"])
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.9.9.9", "::1", "localhost", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com"))
    assert default_allowed_hosts("127.0.0.1") == LOOPBACK_HOSTS
    assert default_allowed_hosts("0.0.0.0") == (*LOOPBACK_HOSTS, "ip")


# ---- CORS -----------------------------------------------------------------------------------------

PREFLIGHT = {"access-control-request-method": "POST", "access-control-request-headers": "content-type,authorization"}


def test_cors_is_off_by_default(tiny_server) -> None:
    r = httpx.options(tiny_server.url + "/v1/completions", headers={"origin": "https://app.example", **PREFLIGHT})
    assert r.status_code >= 400 and not any(k.startswith("access-control-") for k in r.headers)
    r = httpx.get(tiny_server.url + "/v1/models", headers={"origin": "https://app.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_cors_origins_get_a_preflight_and_others_do_not(cors_server) -> None:
    url, host = cors_server.url + "/v1/completions", {"host": "api.example.com"}
    r = httpx.options(url, headers={"origin": "https://app.example", **PREFLIGHT, **host})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in r.headers["access-control-allow-methods"]
    assert "content-type" in r.headers["access-control-allow-headers"].lower()
    r = httpx.options(url, headers={"origin": "https://evil.example", **PREFLIGHT, **host})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    r = httpx.post(url, json=ONE_TOKEN, headers={"origin": "https://app.example", **host}, timeout=30)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"


# ---- the page's headers, docs ----------------------------------------------------------------------

def test_the_page_and_its_files_carry_csp_no_framing_and_nosniff(tiny_server) -> None:
    for path in ("/", "/ui/app.js", "/ui/style.css"):
        r = httpx.get(tiny_server.url + path)
        assert r.status_code == 200, path
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "http" not in csp   # no other origin: the page is offline
        assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(tiny_server.url + "/health").headers["x-content-type-options"] == "nosniff"


def test_docs_are_off_by_default_and_the_schema_stays(tiny_server) -> None:
    """/docs and /redoc load Swagger UI from a CDN; the page's CSP-free HTML would run foreign code."""
    assert httpx.get(tiny_server.url + "/docs").status_code == 404
    assert httpx.get(tiny_server.url + "/redoc").status_code == 404
    assert "/v1/completions" in httpx.get(tiny_server.url + "/openapi.json").json()["paths"]
