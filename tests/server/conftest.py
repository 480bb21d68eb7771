"""Fixtures: real servers (tiny random model) on free loopback ports, one per test module."""
from __future__ import annotations

from typing import Iterator

import pytest

from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, tiny_engine


@pytest.fixture(scope="module")
def tiny_server() -> Iterator[ServerThread]:
    with ServerThread(build_app(tiny_engine(), "tiny")) as server:
        yield server


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[ServerThread]:
    with ServerThread(build_app(tiny_engine(), "tiny", api_key="s3cret", max_body_bytes=4096)) as server:
        yield server

