"""OpenTelemetry traces (server/tracing.py): a span per request with queue / prefill / decode children and the
termination record, under the caller's W3C traceparent; exported by the real `haltwise serve` over OTLP/HTTP
to a receiver started by the test; no SDK import without the flag, a clear error without the extra."""
from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Iterator

import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from haltwise.server import tracing
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, tiny_engine, wait_until
from tests.server.serve_process import ServeProcess

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[ServerThread, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    with ServerThread(build_app(tiny_engine(), "tiny", tracer=tracing.tracer_from(None, exporter=exporter))) as s:
        yield s, exporter


def test_a_request_span_under_the_callers_traceparent_with_phases_and_termination(traced) -> None:
    server, exporter = traced
    exporter.clear()
    client(server.url).completions.create(model="tiny", prompt="hello", max_tokens=5, temperature=0,
                                          stop=["zzz"], extra_body={"ignore_eos": True},
                                          extra_headers={"traceparent": TRACEPARENT})
    assert wait_until(lambda: any(s.name == "haltwise.request" for s in exporter.get_finished_spans()))
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root = spans["haltwise.request"]
    assert format(root.context.trace_id, "032x") == TRACE_ID and format(root.parent.span_id, "016x") == PARENT_ID
    a = root.attributes
    assert a["haltwise.termination.reason"] == "max_tokens" and a["haltwise.termination.layer"] == "engine"
    assert a["haltwise.termination.token_index"] == 4 and a["gen_ai.usage.output_tokens"] == 5
    assert a["haltwise.termination.finish_reason"] == "length" and "haltwise.termination.char_offset" in a
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("length",)
    for name in ("queue", "prefill", "decode"):
        child = spans[name]
        assert child.parent.span_id == root.context.span_id and child.context.trace_id == root.context.trace_id
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    assert spans["queue"].end_time <= spans["prefill"].start_time + 1 and \
        spans["prefill"].end_time <= spans["decode"].start_time + 1
    (event,) = [e for e in root.events if e.name == "termination"]
    assert event.attributes["reason"] == "max_tokens"


def test_without_traceparent_a_new_trace_and_stop_strings_are_redacted(traced) -> None:
    server, exporter = traced
    exporter.clear()
    c = client(server.url)
    forced = c.completions.create(model="tiny", prompt="hello", max_tokens=4, logit_bias={"300": 100}).choices[0]
    stop = forced.text[:len(forced.text) // 2 + 1]          # the forced text repeats: this stop string matches
    exporter.clear()
    r = c.completions.create(model="tiny", prompt="hello", max_tokens=30, logit_bias={"300": 100}, stop=[stop])
    assert r.choices[0].model_extra["termination"]["reason"] == "stop_string"
    assert wait_until(lambda: any(s.name == "haltwise.request" for s in exporter.get_finished_spans()))
    root = next(s for s in exporter.get_finished_spans() if s.name == "haltwise.request")
    assert root.parent is None and format(root.context.trace_id, "032x") != TRACE_ID
    a = root.attributes
    assert a["haltwise.termination.reason"] == "stop_string"
    assert a["haltwise.termination.stop_reason"].startswith(f"<{len(stop)} chars sha256:")   # as in the log line
    assert stop not in " ".join(str(v) for v in a.values())


class _Receiver(BaseHTTPRequestHandler):
    received: list[ExportTraceServiceRequest] = []

    def do_POST(self) -> None:   # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        _Receiver.received.append((self.path, request))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(b"")

    def log_message(self, *args) -> None:
        pass


def test_haltwise_serve_exports_over_otlp_http_to_a_collector() -> None:
    collector = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{collector.server_address[1]}"
    try:
        with ServeProcess(["--otlp-traces-endpoint", endpoint],
                          env={"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_SERVICE_NAME": "haltwise-test"}) as s:
            client(s.url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                                  max_tokens=3, extra_headers={"traceparent": TRACEPARENT})
            assert wait_until(lambda: _spans().get("haltwise.request") is not None, 60)
    finally:
        collector.shutdown()
    spans = _spans()
    assert {"haltwise.request", "queue", "prefill"} <= set(spans)
    root = spans["haltwise.request"]
    assert root.trace_id.hex() == TRACE_ID and root.parent_span_id.hex() == PARENT_ID
    attrs = {kv.key: kv.value for kv in root.attributes}
    assert attrs["haltwise.termination.reason"].string_value in ("max_tokens", "eos", "repetition")
    assert all(path == "/v1/traces" for path, _ in _Receiver.received)
    services = {kv.value.string_value for _, r in _Receiver.received for rs in r.resource_spans
                for kv in rs.resource.attributes if kv.key == "service.name"}
    assert services == {"haltwise-test"}


def _spans() -> dict:
    return {span.name: span for _, r in _Receiver.received for rs in r.resource_spans for ss in rs.scope_spans
            for span in ss.spans}


def test_no_opentelemetry_import_without_the_flag_and_a_clear_error_without_the_extra() -> None:
    code = ("import sys, haltwise.server.app, haltwise.server.serve; "   # (FastAPI itself imports the API)
            "assert not [m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))]")
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert imported.returncode == 0, imported.stderr
    blocked = ("import sys; sys.modules['opentelemetry.sdk.trace'] = None; "   # as if the extra were absent
               "from haltwise.cli import main; sys.exit(main(['serve', '--tiny', '--otlp-traces-endpoint', "
               "'http://127.0.0.1:9']))")
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "pip install 'haltwise[otel]'" in done.stderr, done.stderr
