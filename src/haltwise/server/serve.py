"""`haltwise serve`: command-line options, engine construction, uvicorn with a graceful SIGTERM.

Shutdown order on SIGTERM/SIGINT: the app stops admitting (generation routes and /ready answer 503
with Retry-After) while the listener stays open, so a client that arrives during the drain gets that
503, not a refused connection. Once no request is in flight, or --shutdown-grace seconds have passed,
uvicorn closes the listener, cancels what is left (which aborts those engine requests) and the engine
shuts down; a second signal starts that shutdown at once. The process exits 0. With --replicas /
--ray-address the engines run as Ray Serve replicas behind the same app (haltwise.cluster; ray is
imported only then).
"""
from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from typing import Any

import uvicorn

from haltwise.memory_size import parse_memory
from haltwise.server import connections, limits, prompt_cache_args, secrets, serve_models, tracing
from haltwise.server.app import DEFAULT_MAX_BODY_BYTES, build_app
from haltwise.server.edge_security import default_allowed_hosts
from haltwise.server.served_name import DEFAULT_MODEL_NAME, default_served_name
from haltwise.tools.model_args import add_model_arguments, engine_config_from
from haltwise.toolcalls.formats.registry import ALIASES, FORMATS



def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `haltwise serve`: the shared model/engine options plus the HTTP ones."""
    add_model_arguments(parser, several=True)
    serve_models.add_arguments(parser)
    a = parser.add_argument
    a("--host", default="127.0.0.1", help="bind address (default loopback only)")
    a("--port", type=int, default=8000)
    a("--served-model-name", default=None,
      help="the `model` clients must send (default: the --model name, e.g. qwen2.5-coder-0.5b, or the file's "
           f"name without .gguf; {DEFAULT_MODEL_NAME} for the default model)")
    secrets.add_arguments(parser)
    a("--allowed-hosts", default=None, help="comma-separated Host names the server answers to ('*' any, "
      "'.example.com' a domain, 'ip' any IP literal; default: the loopback names, plus 'ip' beyond loopback)")
    a("--cors-origins", default=None, help="comma-separated origins allowed to call the API from a browser "
                                            "(default: none, CORS off)")
    a("--docs", action="store_true", help="serve /docs and /redoc (they load Swagger UI from a CDN)")
    connections.add_arguments(parser)
    limits.add_arguments(parser)
    prompt_cache_args.add_arguments(parser)
    a("--max-concurrent-per-client", type=int, default=None, metavar="N",
      help="requests in flight per client (its API key, else its address) before 429 + Retry-After (default: off)")
    a("--default-timeout", type=float, default=None, help="seconds per request unless it sets `timeout`")
    a("--watchdog", type=float, default=30.0,
      help="seconds a step may show no progress (no layer done) before its requests fail; a slow step never does")
    a("--max-body-bytes", type=parse_memory, default=DEFAULT_MAX_BODY_BYTES, help="request body limit (413)")
    a("--max-header-bytes", type=parse_memory, default=64 * 1024, help="request line + headers limit")
    a("--shutdown-grace", type=float, default=10.0, help="seconds in-flight requests get on SIGTERM")
    a("--log-content", action="store_true", help="log prompt and output text (off by default)")
    a("--no-ui", action="store_true", help="do not serve the playground page at /")
    a("--allow-special-tokens-in-content", action="store_true",
      help="let user and tool message text spell control tokens such as <|im_start|> (off: it stays text)")
    a("--replicas", type=int, default=None, help="serve N engine replicas on Ray Serve (needs .[cluster]); with "
      "--models-dir or several --model, each replica serves every model and requests go to one that has theirs loaded")
    a("--ray-address", default=None, help="join this Ray cluster (HOST:PORT of `ray start --head`) "
                                           "instead of starting a local one on 127.0.0.1")
    a("--tool-call-parser", default=None, choices=sorted(FORMATS) + sorted(ALIASES), help="tool-call format: hermes (Qwen2.5), llama3_json, mistral "
                                                "(default: chosen from the model's chat template)")
    tracing.add_arguments(parser)
    a("--replica-cpus", type=float, default=1.0, help="CPUs (and torch threads, at least 1) per replica")


def run(args: argparse.Namespace) -> int:
    """Build the engine and run the server until SIGTERM/SIGINT; returns the exit code (0)."""
    from haltwise.engine.async_engine import AsyncEngine

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:  # refused before the model loads: a bad key source, --protect-metrics without a key
        args.api_key = secrets.resolve_api_key(args)
        secrets.check_exposure(args.host, args.api_key, args.protect_metrics)
    except secrets.KeySourceError as exc:
        print(f"haltwise serve: error: {exc}", file=sys.stderr, flush=True)
        return 2
    try:  # also before the model loads: --otlp-traces-endpoint without the otel extra
        args.tracer = tracing.tracer_from(args.otlp_traces_endpoint)
    except SystemExit as exc:
        print(f"haltwise serve: error: {exc}", file=sys.stderr, flush=True)
        return 2
    args.prompt_cache = prompt_cache_args.settings_from(args, args.no_prefix_caching)
    print(f"haltwise: {args.prompt_cache.describe()}", flush=True)
    if serve_models.several_models(args):
        return _serve_several(args)
    args.model = args.model[0] if args.model else None
    args.served_model_name = args.served_model_name or default_served_name(args.model, args.tiny)
    if args.replicas or args.ray_address:
        from haltwise.cluster.launch import serve_cluster

        return serve_cluster(args, _serve)
    from haltwise.engine.draft_build import DraftModelError

    try:
        tiers = args.prompt_cache.open()
    except ValueError as exc:     # an untrusted --prompt-cache-dir
        print(f"haltwise serve: error: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        engine = AsyncEngine.build(args.model, engine_config_from(args), rope_scaling=args.rope_scaling,
                                   default_timeout=args.default_timeout, tiny=args.tiny, watchdog_s=args.watchdog,
                                   prompt_tiers=tiers)
    except DraftModelError as exc:   # --draft-model with another vocabulary: refused, nothing served
        print(f"haltwise serve: error: {exc}", file=sys.stderr, flush=True)
        return 2
    if args.chat_template is not None:
        engine.tokenizer.set_chat_template(args.chat_template)
    try:
        return _serve(args, engine)
    finally:
        if tiers.disk is not None:   # a graceful stop writes what is queued (bounded: WRITE_QUEUE_BLOCKS)
            tiers.disk.flush(timeout=30)


def _serve_several(args: argparse.Namespace) -> int:
    """Several models from one address (serve_models.py), in this process or on Ray replicas (--replicas /
    --ray-address: each replica serves every model, cluster/launch_models.py); refused where it cannot apply."""
    refused = "--served-model-name" if args.served_model_name else "--tiny" if args.tiny else None
    if refused:
        print(f"haltwise serve: error: {refused} serves one model; not with --models-dir or several --model",
              file=sys.stderr, flush=True)
        return 2
    if args.replicas or args.ray_address:
        try:
            args.models_spec = serve_models.spec_from(args)
        except ValueError as exc:            # a bad --models-dir
            print(f"haltwise serve: error: {exc}", file=sys.stderr, flush=True)
            return 2
        args.served_model_name = ", ".join(name for name, _ in args.models_spec.table)
        from haltwise.cluster.launch import serve_cluster

        return serve_cluster(args, _serve, several=True)
    try:
        tiers = args.prompt_cache.open()     # one RAM tier (and disk tier) for every model: entries are per model
        registry = serve_models.build_registry(args, tiers)
    except ValueError as exc:                # an untrusted --prompt-cache-dir, a bad --models-dir
        print(f"haltwise serve: error: {exc}", file=sys.stderr, flush=True)
        return 2
    args.served_model_name = ", ".join(registry.entries)
    try:
        return _serve(args, None, registry)
    finally:
        if tiers.disk is not None:
            tiers.disk.flush(timeout=30)


def _serve(args: argparse.Namespace, engine: Any, models: Any = None) -> int:
    """uvicorn around build_app(engine) (or the registry `models`) until SIGTERM/SIGINT (then a graceful
    drain); returns 0."""
    if engine is not None:
        print(f"haltwise: {engine.describe()}", flush=True)
    conn = connections.limits_from(args)
    hosts = _split(args.allowed_hosts) if args.allowed_hosts else default_allowed_hosts(args.host)
    app = build_app(engine, args.served_model_name, api_key=args.api_key, max_body_bytes=args.max_body_bytes,
                    log_content=args.log_content, shutdown_grace=args.shutdown_grace, ui=not args.no_ui,
                    allow_special_tokens_in_content=args.allow_special_tokens_in_content,
                    allowed_hosts=hosts, cors_origins=_split(args.cors_origins), protect_metrics=args.protect_metrics,
                    body_timeout=conn.body_timeout, docs=args.docs, caps=limits.caps_from(args),
                    max_concurrent_per_client=args.max_concurrent_per_client, tracer=getattr(args, "tracer", None),
                    models=models, default_timeout=args.default_timeout)
    app.state.server.tool_call_parser = args.tool_call_parser
    config = connections.uvicorn_config(app, args.host, args.port, conn, log_level="info",
                                        h11_max_incomplete_event_size=args.max_header_bytes,
                                        timeout_graceful_shutdown=max(1, int(args.shutdown_grace)))
    server = _DrainingServer(config, app.state.server, grace=args.shutdown_grace)
    print(f"haltwise: serving {args.served_model_name} on http://{args.host}:{args.port}", flush=True)
    server.run()
    return 0


def _split(csv: str | None) -> tuple[str, ...]:
    return tuple(x.strip() for x in (csv or "").split(",") if x.strip())


class _DrainingServer(uvicorn.Server):
    """uvicorn.Server that drains before it shuts down.

    The exit signal marks the app as draining (503 for new generations) and starts the drain; the
    listener stays open meanwhile. uvicorn's own shutdown (listener closed, the rest cancelled after
    what is left of the grace) starts when no request task is left or the grace has passed.
    """

    def __init__(self, config: uvicorn.Config, state: Any, grace: float | None = None):
        super().__init__(config)
        self.state = state
        self.grace = float(config.timeout_graceful_shutdown or 0) if grace is None else grace
        self.drain_deadline: float | None = None     # monotonic end of the drain, once a signal came

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.state.draining = True
        if self.drain_deadline is None and not self.should_exit:
            self.drain_deadline = time.monotonic() + self.grace
            return
        super().handle_exit(sig, frame)   # a second signal: shut down now
        # uvicorn re-raises captured signals after its graceful shutdown (the process would die of
        # SIGTERM, exit -15); here the signal is handled: drain, then return 0.
        getattr(self, "_captured_signals", []).clear()

    async def on_tick(self, counter: int) -> bool:
        if self.drain_deadline is not None and not self.should_exit:
            left = self.drain_deadline - time.monotonic()
            if not self.server_state.tasks or left <= 0:
                self.config.timeout_graceful_shutdown = max(1, math.ceil(left))
                self.should_exit = True
        return await super().on_tick(counter)


if __name__ == "__main__":     # `python -m haltwise.server.serve ...` is `haltwise serve ...`
    from haltwise.cli import main

    sys.exit(main(["serve", *sys.argv[1:]]))
