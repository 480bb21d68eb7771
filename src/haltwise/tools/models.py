"""`haltwise models [load|unload NAME]`: what a running server offers and has loaded; load or unload one.

Reads GET /v1/models (status, KV capacity, resident memory); load and unload are POST /models/load and
/models/unload. The API key comes from --api-key or $HALTWISE_API_KEY, as for the server.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("list", "load", "unload"), default="list")
    p.add_argument("name", nargs="?", default=None, help="the model to load or unload")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default http://127.0.0.1:8000)")
    p.add_argument("--api-key", default=None, help="the server's API key (default: $HALTWISE_API_KEY)")
    p.add_argument("--json", action="store_true", help="print the server's JSON")


def table(rows: list[dict]) -> str:
    lines = [f"{'NAME':<28} {'STATUS':<9} {'KV TOKENS':>9} {'KV MiB':>7} {'RESIDENT MiB':>12} {'IN FLIGHT':>9}"]
    for r in rows:
        kv = r.get("kv_capacity") or {}
        resident = r.get("resident_bytes")
        lines.append(f"{r['id']:<28} {r['status']['value']:<9} {kv.get('tokens', ''):>9} "
                     f"{'' if not kv else round(kv['bytes'] / 2**20):>7} "
                     f"{'' if resident is None else round(resident / 2**20):>12} {r.get('in_flight', ''):>9}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    import httpx

    key = args.api_key or os.environ.get("HALTWISE_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    base = args.url.rstrip("/")
    try:
        if args.action != "list":
            if not args.name:
                print(f"haltwise models {args.action}: name the model", file=sys.stderr)
                return 2
            r = httpx.post(f"{base}/models/{args.action}", json={"model": args.name}, headers=headers,
                           timeout=600)
        else:
            r = httpx.get(f"{base}/v1/models", headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        print(f"haltwise models: cannot reach {base}: {exc}", file=sys.stderr)
        return 1
    if r.status_code != 200:
        print(f"haltwise models: {r.status_code} {r.text}", file=sys.stderr)
        return 1
    body = r.json()
    if args.json or args.action != "list":
        print(json.dumps(body, indent=2))
    else:
        print(table(body["data"]))
    return 0
