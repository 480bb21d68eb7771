"""Output of eval-longctx: the text table, the JSON document and the perplexity-vs-position plot."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def table(result: dict[str, Any]) -> str:
    """Perplexity per method and length (and the ratio to the method's own 1x), then passkey hits."""
    trained = result["trained_length"]
    rows = result["perplexity"]
    lengths = sorted({r["length"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    ppl = {(r["method"], r["length"]): r["ppl"] for r in rows}
    heads = [f"{n / trained:g}x ({n})" for n in lengths]
    lines = [f"perplexity over the whole window (trained length {trained}; factor = length / trained)",
             f"{'method':<9}" + "".join(f"{h:>16}" for h in heads) + "".join(
                 f"{f'{n / trained:g}x / 1x':>11}" for n in lengths if n != trained)]
    for m in methods:
        cells = "".join(f"{ppl[(m, n)]:>16.3f}" if (m, n) in ppl else f"{'-':>16}" for n in lengths)
        base = ppl.get((m, trained))
        ratios = "".join(f"{ppl[(m, n)] / base:>11.2f}" if base and (m, n) in ppl else f"{'-':>11}"
                         for n in lengths if n != trained)
        lines.append(f"{m:<9}{cells}{ratios}")
    if result.get("passkey"):
        lines += ["", "passkey retrieval (greedy; hit = the number appears in the answer)",
                  f"{'method':<9}{'length':>8}{'depth':>7}{'tokens':>8}  {'hit':<4} answer"]
        for p in result["passkey"]:
            lines.append(f"{p['method']:<9}{p['length']:>8}{p['depth']:>7.0%}{p['prompt_tokens']:>8}  "
                         f"{'yes' if p['success'] else 'no':<4} {p['answer']!r} (key {p['key']})")
    return "\n".join(lines)


def write_json(path: str | Path, result: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def plot(path: str | Path, result: dict[str, Any]) -> Path:
    """One panel per window length: perplexity (log scale) vs position, a line per method."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure  # the OO API keeps no global pyplot state

    trained = result["trained_length"]
    lengths = sorted({r["length"] for r in result["perplexity"]})
    fig = Figure(figsize=(5.5 * len(lengths), 4.5), layout="constrained")
    axes = fig.subplots(1, len(lengths), squeeze=False)[0]
    for ax, n in zip(axes, lengths):
        for r in (r for r in result["perplexity"] if r["length"] == n):
            xs = [(b["start"] + b["end"]) / 2 for b in r["buckets"]]
            ax.plot(xs, [b["ppl"] for b in r["buckets"]], marker="o", markersize=3, label=r["method"])
        ax.axvline(trained, color="grey", linestyle="--", linewidth=1)
        ax.set_yscale("log")
        ax.set_title(f"window {n} tokens ({n / trained:g}x trained)")
        ax.set_xlabel("position (token)")
        ax.set_ylabel("perplexity")
        ax.legend(fontsize=8)
    fig.suptitle(f"{result['model']}: perplexity vs position per RoPE scaling method")
    fig.savefig(path, dpi=100)
    return Path(path)
