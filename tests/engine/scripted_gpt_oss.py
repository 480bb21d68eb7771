"""The tiny gpt-oss fixture, answering in harmony on cue, for tests of the harmony split through the server.

The model is tests/models/converted.py's gpt-oss (random weights, converted by llama.cpp's converter, the real
gpt-oss template and special tokens in the GGUF), run by the real engine (float32). Random weights never write
harmony by themselves, so the test-only wrapper of tiny_qwen3.py (ScriptedLogits: +100 on one logit per row)
steers it through a script keyed on a cue word in the last user message: SCRIPTS[cue] is the reply as
harmony messages. After a tool result (the template's `<|start|>functions.NAME to=assistant...`) the reply is
AFTER_TOOL[cue]. The script reads the tokens so far: when the engine forces <|end|> into an analysis (budget),
the model goes on with its next message, as a real one would. Grammar masks still win over the bias.
"""
from __future__ import annotations

from haltwise.config import EngineConfig
from haltwise.engine.engine import LLMEngine
from haltwise.engine.factory import build_engine
from tests.engine.tiny_qwen3 import ScriptedLogits, _continue
from tests.models.converted import fixture

ASSISTANT, USER, TOOL = "<|start|>assistant", "<|start|>user<|message|>", "<|start|>functions."


def analysis(text: str) -> str:
    return f"<|channel|>analysis<|message|>{text}<|end|>"


def final(text: str) -> str:
    return f"{ASSISTANT}<|channel|>final<|message|>{text}<|return|>"


def call(name: str, arguments: str) -> str:
    return f"{ASSISTANT}<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{arguments}<|call|>"


THINK, ANSWER = "The user greets me. STOP is only a word here.", "Hello! Do STOP by again."
WEATHER_THINK, WEATHER_ARGS = "The user wants the weather in Paris.", '{"city": "Paris"}'
AFTER_THINK, AFTER_ANSWER = "The tool says sunny.", "It is sunny in Paris."
SCRIPTS = {
    "hello": [analysis(THINK), final(ANSWER)],
    "weather": [analysis(WEATHER_THINK), call("get_weather", WEATHER_ARGS)],
    "direct": [f"<|channel|>final<|message|>{ANSWER}<|return|>"],
}
AFTER_TOOL = {"weather": [analysis(AFTER_THINK), final(AFTER_ANSWER)]}


def next_harmony(tokenizer, token_ids: list[int]) -> int | None:
    """The token the scripted model wants after token_ids (prompt + output so far), or None (no opinion)."""
    text = tokenizer.decode(token_ids, skip_special_tokens=False)
    user_at, tool_at = text.rfind(USER), text.rfind(TOOL)
    if user_at < 0:
        return None
    user = text[user_at + len(USER):].partition("<|end|>")[0]
    cue = next((c for c in SCRIPTS if c in user), None)
    if cue is None:
        return None
    messages = AFTER_TOOL.get(cue) if tool_at > user_at else SCRIPTS[cue]
    start = text.find(ASSISTANT, max(user_at, tool_at))
    if messages is None or start < 0:
        return None
    produced = text[start + len(ASSISTANT):]
    done = produced.count("<|end|>")              # messages already closed (the engine may have forced one)
    current = produced.rpartition("<|end|>")[2] if done else produced
    rest = "".join(messages[done:])
    if not rest or not rest.startswith(current):
        return None
    return _continue(tokenizer, rest, current, "<|return|>")


def scripted_gpt_oss_engine(max_model_len: int = 512) -> LLMEngine:
    """An LLMEngine over the gpt-oss fixture's q8_0 GGUF (float32), steered by SCRIPTS."""
    path = fixture("gpt-oss").gguf("q8_0")
    engine = build_engine(path, EngineConfig(kv_cache_memory=16 * 2**20, max_model_len=max_model_len))
    engine.runner = ScriptedLogits(engine.runner, engine.tokenizer, next_harmony)
    return engine
