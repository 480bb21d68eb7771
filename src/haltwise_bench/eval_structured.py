"""`haltwise eval-structured`: do structured answers end by themselves, get closed, or run to the limit?

Runs the structured-output prompt set (src/haltwise_bench/data/structured_prompts.jsonl: json_object and
json_schema prompts) and the tool prompt set (tool_prompts.jsonl, through LLM.chat(tools=...)) on one
model, in this process, greedy, default detectors. Per answer it records finish_reason, termination
reason, whether the server closed a looping value (forced_close) and whether the JSON parses and
validates. Summary per set: ended by itself (eos / grammar / tool_call / stop string), closed
(forced close), tool_loop, still "length", and the share valid.

Only the public offline API is used (LLM, SamplingParams), so the same file runs against an older
checkout for a before/after in one sitting: `PYTHONPATH=<old>/src python src/haltwise_bench/eval_structured.py`.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from importlib import resources
from typing import Any

import jsonschema

ENDED_BY_ITSELF = {"eos", "grammar", "tool_call", "stop_string", "stop_token"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="smollm2-135m", help="a named model or GGUF path")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--sets", default="structured,tools", help="structured, tools or both")
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts of each set")
    parser.add_argument("--json", default=None, help="write every answer and the summary here")


def _lines(name: str) -> list[dict]:
    text = resources.files("haltwise_bench.data").joinpath(name).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _record(pid: str, out: Any, schema: Any) -> dict[str, Any]:
    o = out.outputs[0]
    term = o.termination
    valid = None
    if schema is not None:
        try:
            jsonschema.validate(json.loads(o.text), schema)
            valid = True
        except (ValueError, jsonschema.ValidationError):
            valid = False
    calls = getattr(o, "tool_calls", None) or []
    return {"id": pid, "finish_reason": term.finish_reason, "reason": term.reason.value,
            "forced_close": bool(getattr(term, "forced_close", False)), "valid": valid, "tokens": len(o.token_ids),
            "calls": [c["function"]["name"] + c["function"]["arguments"] for c in calls],
            "detail": term.detail[:200], "text": o.text[:300]}


def summarize(rows: list[dict]) -> dict[str, Any]:
    n = len(rows)
    by_itself = sum(r["reason"] in ENDED_BY_ITSELF and not r["forced_close"] for r in rows)
    closed = sum(r["forced_close"] for r in rows)
    checked = [r for r in rows if r["valid"] is not None]
    return {"answers": n, "ended_by_itself": by_itself, "closed": closed,
            "tool_loop": sum(r["reason"] == "tool_loop" for r in rows),
            "length": sum(r["finish_reason"] == "length" for r in rows),
            "valid": f"{sum(bool(r['valid']) for r in checked)}/{len(checked)}",
            "reasons": dict(Counter(r["reason"] for r in rows)),
            "finish_reasons": dict(Counter(str(r["finish_reason"]) for r in rows))}


def run(args: argparse.Namespace) -> int:
    from haltwise.llm import LLM
    from haltwise.sampling_params import SamplingParams

    llm = LLM(args.model, dtype="auto")
    sets = args.sets.split(",")
    report: dict[str, Any] = {"model": args.model}
    if "structured" in sets:
        rows = []
        for p in _lines("structured_prompts.jsonl")[:args.limit]:
            so = {"json_object": True} if p["format"] == "json_object" else {"json": p["schema"]}
            params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, structured_outputs=so)
            out = llm.chat(p["messages"], params)[0]
            rows.append(_record(p["id"], out, p.get("schema", {"type": "object"})))
            print(json.dumps(rows[-1])[:400], file=sys.stderr)
        report["structured"] = {"summary": summarize(rows), "answers": rows}
    if "tools" in sets:
        catalog = json.loads(resources.files("haltwise_bench.data").joinpath("tool_catalog.json").read_text())["tools"]
        rows = []
        for p in _lines("tool_prompts.jsonl")[:args.limit]:
            tools = [t for t in catalog if t["function"]["name"] in p["tools"]]
            params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
            out = llm.chat(p["messages"], params, tools=tools, tool_choice=p.get("tool_choice"),
                           parallel_tool_calls=p.get("parallel_tool_calls"))[0]
            rows.append(_record(p["id"], out, None))
            print(json.dumps(rows[-1])[:400], file=sys.stderr)
        report["tools"] = {"summary": summarize(rows), "answers": rows}
    for name in ("structured", "tools"):
        if name in report:
            print(name, json.dumps(report[name]["summary"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap)
    sys.exit(run(ap.parse_args()))
