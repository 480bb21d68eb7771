"""The engine's `turn` preset uses the stopping room's turn markers (stopping/presets.py), the one list."""
from __future__ import annotations

import pytest

from haltwise.sampling_params import SamplingParams
from haltwise.stopping.presets import DEFAULT_TURN_MARKERS
from haltwise.stopping.termination import Reason
from tests.engine.tiny_qwen3 import tiny_qwen3_engine


@pytest.mark.parametrize("cue, marker, answer", [("handover", "\n### User:", "Bye."),
                                                  ("instruct", "\n### Instruction", "Done.")])
def test_the_turn_preset_cuts_at_every_marker_of_the_presets_list(cue, marker, answer) -> None:
    assert marker in DEFAULT_TURN_MARKERS
    engine = tiny_qwen3_engine()
    tok = engine.tokenizer
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": cue}]), add_special_tokens=False)
    engine.add_request("r", prompt, SamplingParams(max_tokens=64, temperature=0.0, stop_presets=["turn"]))
    final = None
    while engine.has_unfinished():
        final = next((u for u in engine.step() if u.finished), final)
    out = final.outputs[0]
    assert (out.text, out.termination.reason, out.stop_reason) == (answer, Reason.STOP_STRING, "turn")
