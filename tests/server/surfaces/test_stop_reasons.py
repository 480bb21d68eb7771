"""The termination mapping table: every reason has words on every surface, the README shows the same table."""
from __future__ import annotations

from pathlib import Path

import pytest

from haltwise.stopping.termination import Reason, Termination
from haltwise.server.surfaces.stop_reasons import TABLE, stop_sequence_of, words_for

README = Path(__file__).resolve().parents[3] / "README.md"


def test_every_reason_has_a_row() -> None:
    assert {r.value for r in Reason} | {"tool_call"} == set(TABLE)


@pytest.mark.parametrize("reason", list(Reason))
def test_cut_texts_are_incomplete_complete_texts_are_not(reason: Reason) -> None:
    words = words_for(Termination(reason), reason.finish_reason)
    if reason.finish_reason == "length":   # OpenAI says cut: every surface says cut
        assert words.anthropic in ("max_tokens", "model_context_window_exceeded")
        assert words.status == "incomplete" and words.incomplete
    elif reason.finish_reason == "stop":
        assert words.anthropic in ("end_turn", "stop_sequence") and words.status == "completed"
        assert words.incomplete is None
    elif reason.finish_reason == "tool_calls":   # the model called a tool (issue 23's business-layer reason)
        assert (words.anthropic, words.status, words.incomplete) == ("tool_use", "completed", None)
    else:                                  # error / cancelled: no answer to map
        assert words.anthropic is None and words.status in ("failed", "cancelled")


def test_the_outputs_own_finish_reason_wins() -> None:
    # a structure cut by the loop detector (issue 23's contract: finish_reason length) is never "complete"
    words = words_for(Termination(Reason.REPETITION), "length")
    assert (words.anthropic, words.status, words.incomplete) == ("max_tokens", "incomplete", "repetition")
    assert words_for(Termination(Reason.EOS), "tool_calls").anthropic == "tool_use"
    assert words_for(Termination(Reason.MAX_TOKENS), "length").incomplete == "max_output_tokens"


def test_stop_sequence() -> None:
    assert stop_sequence_of(Termination(Reason.STOP_STRING, stop_reason="\n\n")) == "\n\n"
    assert stop_sequence_of(Termination(Reason.STOP_TOKEN, stop_reason=2), "<|im_end|>") == "<|im_end|>"
    assert stop_sequence_of(Termination(Reason.EOS)) is None


def test_readme_shows_the_same_table() -> None:
    text = README.read_text() + "\n" + (README.parent / "docs" / "termination.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip() in TABLE}
    assert set(rows) == set(TABLE)
    for reason, words in TABLE.items():
        cells = [c.strip() for c in rows[reason].split("|")[1:-1]]
        assert cells[2].startswith(words.anthropic or "error"), reason
        assert cells[3].startswith(words.status), reason
        if words.incomplete:
            assert cells[3] == f"{words.status} / {words.incomplete}", reason
