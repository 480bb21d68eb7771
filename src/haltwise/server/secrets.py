"""Where `haltwise serve` gets its API key, and what it refuses or warns about at start.

Sources, first that is set wins: `--api-key KEY` (visible in `ps`: a warning says so), `--api-key-file
PATH` (the file's content, surrounding whitespace stripped), the environment variable HALTWISE_API_KEY.
A source that is set but empty (or whitespace only) is an error: an empty key must never mean "no auth".
"""
from __future__ import annotations

import argparse
import logging
import os
import stat
from pathlib import Path

from haltwise.server.edge_security import is_loopback

ENV_VAR = "HALTWISE_API_KEY"
log = logging.getLogger("haltwise.server")


class KeySourceError(ValueError):
    """A key source is unusable; the message says which and why (serve exits 2 with it)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--api-key", default=None, help="require `Authorization: Bearer KEY` on /v1/*, /tokenize, /detokenize "
                                       f"(prefer --api-key-file or ${ENV_VAR}: a flag shows in `ps`)")
    a("--api-key-file", default=None, help="read the API key from this file (whitespace stripped)")
    a("--protect-metrics", action="store_true", help="/metrics and /cluster need the API key too")


def resolve_api_key(args: argparse.Namespace, environ: dict[str, str] | None = None) -> str | None:
    """The key from the flag, the file or the environment (in that order); None when none is set."""
    env = os.environ if environ is None else environ
    if args.api_key is not None and args.api_key_file is not None:
        raise KeySourceError("give the API key once: --api-key or --api-key-file, not both")
    if args.api_key is not None:
        key, source = args.api_key, "--api-key"
    elif args.api_key_file is not None:
        key, source = _read_key_file(Path(args.api_key_file)), f"--api-key-file {args.api_key_file}"
    elif ENV_VAR in env:
        key, source = env[ENV_VAR], f"${ENV_VAR}"
    else:
        return None
    key = key.strip()
    if not key:
        raise KeySourceError(f"the API key from {source} is empty; an empty key would disable authentication. "
                             "Give a non-empty key, or none at all for a keyless server")
    if source == "--api-key":
        log.warning("haltwise: the API key given with --api-key is visible to other users in `ps`; "
                    f"prefer --api-key-file PATH or ${ENV_VAR}")
    return key


def _read_key_file(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KeySourceError(f"cannot read the API key file {path}: {exc}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(f"haltwise: the API key file {path} is readable by other users (chmod 600 it)")
    return text


def check_exposure(host: str, api_key: str | None, protect_metrics: bool) -> None:
    """Refuse --protect-metrics without a key; warn when serving beyond loopback without a key."""
    if protect_metrics and api_key is None:
        raise KeySourceError("--protect-metrics needs an API key (--api-key-file, $HALTWISE_API_KEY or --api-key)")
    if api_key is None and not is_loopback(host):
        log.warning(f"haltwise: WARNING: serving on {host} (beyond loopback) without an API key: anyone who can "
                    f"reach this address can use the model. Set ${ENV_VAR} or --api-key-file")
