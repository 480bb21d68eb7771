"""What one sequence's stopper watches for, from its SamplingParams: stops that are special tokens, and the
text watchers beside the stop strings (presets, the tool-call loop watch).

Special tokens are removed from the text, so stops equal to their text are token stops: token id ->
(stop_reason, preset name or None). Stop strings also stay in the matcher, so the same characters spelled
by ordinary tokens stop too. The `json` preset is off under a grammar (the grammar ends JSON exactly);
`auto` is resolved before (stopping/intent.py). Tool calls add a watcher for repeated calls
(toolcalls/loop_watch.py, reason tool_loop), run like a stop string.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from haltwise.sampling_params import SamplingParams
from haltwise.stopping.presets import make_preset
from haltwise.stopping.stop_strings import TextStop


def special_token_stops(params: SamplingParams, special_token_texts: Mapping[str, int],
                        turn_markers: Sequence[str]) -> dict[int, tuple[str, str | None]]:
    """Token id -> (stop_reason, preset) for the `turn` preset's markers and the stops that are special tokens."""
    special: dict[int, tuple[str, str | None]] = {}
    if "turn" in params.stop_presets:
        for m in turn_markers:
            if m in special_token_texts:
                special.setdefault(special_token_texts[m], ("turn", "turn"))
    for s in params.stop:
        if s in special_token_texts:
            special[special_token_texts[s]] = (s, None)
    return special


def preset_watchers(params: SamplingParams, turn_markers: Sequence[str]) -> list[TextStop]:
    """The text watchers besides the stop strings' matcher: each preset once, then the tool-call loop watch."""
    presets = [p for p in dict.fromkeys(params.stop_presets)
               if p != "auto" and not (p == "json" and params.structured_outputs is not None)]
    watchers: list[TextStop] = [make_preset(name, turn_markers) for name in presets]
    rd = params.repetition_detection
    if rd.enabled and rd.tool_loops and params.tool_calls is not None:
        watchers.append(params.tool_calls.loop_watch())
    return watchers
