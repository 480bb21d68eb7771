"""OpenTelemetry traces (opt-in): one span per engine request, exported over OTLP/HTTP.

Enabled by `--otlp-traces-endpoint URL` (or the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); the other
standard variables apply as the SDK reads them (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_EXPORTER_OTLP_HEADERS / _TIMEOUT / _COMPRESSION, OTEL_BSP_*). The SDK and exporter are the optional
extra `otel` (pip install 'haltwise[otel]'); without the flag nothing of OpenTelemetry is imported.

    HTTP request (traceparent?) --TraceContext middleware--> contextvar (tracer, parent context)
    RequestRecorder (request_log.py) --begin_trace()--> RequestTrace, ended once with the finish record

    span "haltwise.request"  [arrival .. finish]   attributes: gen_ai.* usage and latencies, and the
      |                                             termination record (haltwise.termination.*, redacted
      |                                             as in the log line unless --log-content)
      |- "queue"    [arrival .. first step that ran it]
      |- "prefill"  [.. first token]                (a scoring request, max_tokens 0: until the end)
      |- "decode"   [first token .. finish]
      event "termination" per choice, with its record
"""
from __future__ import annotations

import contextvars
import os
import time
from typing import Any
from urllib.parse import urlsplit

_current: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar("haltwise_trace", default=None)
MISSING = ("--otlp-traces-endpoint needs OpenTelemetry: pip install 'haltwise[otel]' "
           "(opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)")


def add_arguments(parser: Any) -> None:
    parser.add_argument("--otlp-traces-endpoint", default=None, metavar="URL",
                        help="export a trace span per request to this OTLP/HTTP endpoint, e.g. "
                             "http://localhost:4318/v1/traces (needs .[otel]; OTEL_* variables apply)")


def tracer_from(endpoint: str | None, exporter: Any = None) -> "RequestTracer | None":
    """The tracer for --otlp-traces-endpoint (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), None when neither is set.
    exporter: a span exporter to use instead of OTLP (tests: the SDK's InMemorySpanExporter).
    Raises SystemExit with an install hint when OpenTelemetry is not installed."""
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if endpoint is None and exporter is None:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        raise SystemExit(MISSING) from None
    if exporter is None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise SystemExit(MISSING) from None
        exporter, processor = OTLPSpanExporter(endpoint=_traces_url(endpoint)), BatchSpanProcessor
    else:
        processor = SimpleSpanProcessor
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "haltwise")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor(exporter))
    return RequestTracer(provider)


def _traces_url(endpoint: str) -> str:
    """An OTLP/HTTP base URL (http://host:4318) gets the standard /v1/traces path; a full URL is kept."""
    return endpoint.rstrip("/") + "/v1/traces" if urlsplit(endpoint).path in ("", "/") else endpoint


class RequestTracer:
    """Owns the TracerProvider; shutdown() flushes what is left (the app's shutdown calls it)."""

    def __init__(self, provider: Any):
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.tracer = provider.get_tracer("haltwise")
        self.propagator = TraceContextTextMapPropagator()

    def shutdown(self) -> None:
        self.provider.shutdown()


class TraceContext:
    """ASGI middleware: the request's W3C trace context (traceparent / tracestate) becomes the parent of the
    spans its engine requests record (through a contextvar, so no route needs to know)."""

    def __init__(self, app: Any, tracer: RequestTracer):
        self.app, self.tracer = app, tracer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        token = _current.set((self.tracer, self.tracer.propagator.extract(headers)))
        try:
            await self.app(scope, receive, send)
        finally:
            _current.reset(token)


def begin_trace(request_id: str) -> "RequestTrace | None":
    """A trace for one engine request of the HTTP request being served; None when tracing is off."""
    current = _current.get()
    return RequestTrace(current[0], current[1], request_id) if current is not None else None


class RequestTrace:
    """Times of one engine request, turned into spans once, when it ends (monotonic -> wall clock)."""

    def __init__(self, tracer: RequestTracer, parent: Any, request_id: str):
        self.tracer, self.parent, self.request_id = tracer, parent, request_id
        self.arrival = time.monotonic()

    def end(self, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int,
            queue: float | None, ttft: float | None, latency: float) -> None:
        """choices: the log line's per-choice records (request_log.py; redacted unless --log-content)."""
        wall_now, mono_now = time.time_ns(), time.monotonic()

        def at(offset: float) -> int:   # seconds after arrival -> epoch nanoseconds
            return wall_now - int((mono_now - self.arrival - offset) * 1e9)

        tracer = self.tracer.tracer
        span = tracer.start_span("haltwise.request", context=self.parent, start_time=at(0.0),
                                 attributes=_attributes(self.request_id, choices, prompt_tokens, completion_tokens,
                                                        queue, ttft, latency))
        from opentelemetry import trace

        inside = trace.set_span_in_context(span, self.parent)
        queued = min(queue if queue is not None else latency, latency)
        first = min(ttft, latency) if ttft is not None else latency
        phases = [("queue", 0.0, queued), ("prefill", queued, max(queued, first))]
        if ttft is not None:
            phases.append(("decode", first, latency))
        for name, start, stop in phases:
            tracer.start_span(name, context=inside, start_time=at(start)).end(end_time=at(stop))
        for choice in choices:
            span.add_event("termination", _scalars(choice), timestamp=at(latency))
        span.end(end_time=at(latency))


def _attributes(request_id: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int,
                queue: float | None, ttft: float | None, latency: float) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.request.id": request_id, "gen_ai.usage.input_tokens": prompt_tokens,
                             "gen_ai.usage.output_tokens": completion_tokens, "haltwise.latency.e2e_s": latency,
                             "gen_ai.response.finish_reasons": [str(c.get("finish_reason")) for c in choices]}
    if queue is not None:
        attrs["haltwise.latency.queue_s"] = queue
    if ttft is not None:
        attrs["haltwise.latency.ttft_s"] = ttft
    if choices:   # the first choice's termination record (each choice's is on its event)
        attrs.update({f"haltwise.termination.{k}": v for k, v in _scalars(choices[0]).items()})
    return attrs


def _scalars(record: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attributes take no None: absent values are left out, others kept as str/int/float/bool."""
    return {k: v if isinstance(v, (str, int, float, bool)) else str(v) for k, v in record.items() if v is not None}
