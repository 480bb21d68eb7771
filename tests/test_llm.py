"""The offline API resolves stop_presets "auto" on the prompt (generate) or the last user turn (chat)."""
import pytest

from haltwise.llm import LLM
from tests.conftest import greedy


@pytest.fixture(scope="module")
def tiny():
    return LLM(tiny=True, kv_cache_memory=8 * 2**20, max_model_len=256)


def test_generate_and_chat_report_the_auto_choice(tiny):
    out = tiny.generate(["List three fruits.", "List two trees."], greedy(6, stop_presets=["auto"]))
    assert all(o.outputs[0].termination.detail.endswith("[auto -> paragraph: asks for a list]") for o in out)
    chat = tiny.chat([{"role": "user", "content": "Return JSON."}, {"role": "assistant", "content": "{}"},
                      {"role": "user", "content": "Who wrote Hamlet?"}], greedy(6, stop_presets=["auto"]))
    assert chat[0].outputs[0].termination.detail.endswith("[auto -> line: a one-line factual question]")
    plain = tiny.generate("List three fruits.", greedy(6))
    assert "auto" not in plain[0].outputs[0].termination.detail
