"""A tiny qwen3-family engine that reasons on cue, for tests of the reasoning mechanics.

No small reasoning GGUF ships on PyPI, so the mechanics are tested here: a random-weight 2-layer qwen3
model (q/k norms) over the tiny BPE vocabulary plus Qwen3's `<think>` / `</think>` (one non-special token
each, as in Qwen3's tokenizer.json), rendering prompts with the REAL Qwen3 chat template
(data/Qwen-Qwen3-0.6B.jinja, see data/SOURCE.md). The model's forward pass runs for every token; a
test-only wrapper around the engine's model runner (ScriptedLogits) then adds +100 to one logit per row,
chosen by a script keyed on a cue word in the last user message: the model "reasons" SCRIPTS[cue].reasoning
inside <think>...</think>, then answers SCRIPTS[cue].answer and ends with <|im_end|>. The script reads the
tokens so far, so when the engine forces </think> early (budget, loop) the scripted model continues with
its answer, as a real model would continue after a closed section. A grammar mask (-inf) still wins over
the bias, so under a grammar the answer is whatever the grammar allows.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from haltwise.config import EngineConfig
from haltwise.engine.engine import LLMEngine
from haltwise.models.tiny import tiny_llama
from haltwise.tokenizer.tiny import tiny_tokenizer

QWEN3_TEMPLATE = (Path(__file__).parent / "data" / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
ASSISTANT = "<|im_start|>assistant\n"
BIAS = 100.0


@dataclass(frozen=True)
class Script:
    reasoning: str | None   # None: the model answers at once (never opens a section)
    answer: str
    reasoning_end: str = "</think>"   # what the model writes when its reasoning is done


SCRIPTS = {
    "split": Script("Let me think about the fox. It is quick.", "The fox is quick."),
    "stop": Script("I must not STOP while thinking, not STOP.", "Done thinking. STOP here, please."),
    "loop": Script("the dog " * 40, "Out of the loop."),
    "grammar": Script("Maybe the answer is hello world, not a number.", "hello world"),
    "long": Script("one two three four five six seven eight nine ten eleven twelve", "Twelve."),
    "plain": Script(None, "Hello there."),
    "paragraph": Script("First idea.\n\nSecond idea.", "One line.\n\nMore text."),
    "quit": Script("I give up", "never said", reasoning_end="<|im_end|>"),
    "handover": Script(None, "Bye.\n### User: and you?"),       # a turn marker of stopping/presets.py
    "instruct": Script(None, "Done.\n### Instruction: more"),
}


def qwen3_tokenizer():
    return tiny_tokenizer(QWEN3_TEMPLATE, added_tokens=("<think>", "</think>"))


def next_scripted(tokenizer, token_ids: list[int]) -> int | None:
    """The token the scripted model wants after token_ids (prompt + output so far), or None (no opinion)."""
    text = tokenizer.decode(token_ids, skip_special_tokens=False)
    head, found, tail = text.rpartition(ASSISTANT)
    if not found:
        return None
    user = head.rpartition("<|im_start|>user\n")[2]
    script = next((s for cue, s in SCRIPTS.items() if cue in user), None)
    if script is None:
        return None
    if "</think>" in tail:
        return _continue(tokenizer, script.answer, tail.partition("</think>")[2].lstrip("\n"), "<|im_end|>")
    if "<think>" in tail:
        return _continue(tokenizer, script.reasoning or "", tail.partition("<think>")[2], script.reasoning_end)
    if script.reasoning is not None and not tail:
        return tokenizer.token_to_id("<think>")
    return _continue(tokenizer, script.answer, tail, "<|im_end|>")


def _continue(tokenizer, target: str, produced: str, end: str) -> int:
    """The first token of what is left of target, or `end` once target is written (or abandoned)."""
    if len(produced) < len(target) and target.startswith(produced):
        return tokenizer.encode(target[len(produced):], add_special_tokens=False)[0]
    return tokenizer.token_to_id(end)


class ScriptedLogits:
    """Test-only wrapper of a ModelRunner: the real logits, plus BIAS on the scripted token of each row
    (script(tokenizer, token ids so far) -> token id or None; tests/engine/scripted_gpt_oss.py has another)."""

    def __init__(self, runner, tokenizer, script=None):
        self.runner, self.tokenizer = runner, tokenizer
        self.script = script or next_scripted

    def execute(self, rows) -> torch.Tensor:
        logits = self.runner.execute(rows)
        bias = torch.zeros(logits.shape, dtype=logits.dtype)
        for j, row in enumerate(r for r in rows if r.sample):
            wanted = self.script(self.tokenizer, row.token_ids[:row.end])
            if wanted is not None:
                bias[j, wanted] = BIAS
        return logits + bias

    def __getattr__(self, name):
        return getattr(self.runner, name)


def tiny_qwen3_engine(max_model_len: int = 512, seed: int = 0) -> LLMEngine:
    """An LLMEngine over the scripted tiny qwen3 model (float32, no kernel plan)."""
    tokenizer = qwen3_tokenizer()
    net = tiny_llama(tokenizer.vocab_size, seed=seed, max_model_len=max_model_len, architecture="qwen3")
    config = EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=max_model_len)
    engine = LLMEngine(net, net.config, tokenizer, config, max_model_len)
    engine.runner = ScriptedLogits(engine.runner, tokenizer)
    return engine
