"""count-tokens counts exactly what the engine sees (SPEC §3): plain and --chat, SmolLM2 and tiny."""
import json

import pytest

from haltwise.cli import main
from haltwise.errors import ContextLengthExceeded
from haltwise.llm import LLM
from haltwise.tools.count_tokens import count
from tests.conftest import greedy

TEXT = "Hello there! Café au lait, naïve résumé.\n  Indented line with <|im_start|> inside it, and 12345 digits."


@pytest.fixture(scope="module")
def tiny():
    return LLM(tiny=True)


def _engine_counts(llm, text):
    plain = llm.generate(text, greedy(1))[0]
    chat = llm.chat([{"role": "user", "content": text}], greedy(1))[0]
    return len(plain.prompt_token_ids), len(chat.prompt_token_ids)


def _cli(capsys, *argv):
    code = main(["count-tokens", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_count_equals_engine_prompt_tokens(which, request, tmp_path, capsys):
    llm = request.getfixturevalue(which)
    plain_n, chat_n = _engine_counts(llm, TEXT)
    window = llm.engine.max_model_len
    assert count(TEXT, llm.tokenizer, window)["prompt_tokens"] == plain_n
    counted = count(TEXT, llm.tokenizer, window, chat=True)
    assert counted["prompt_tokens"] == chat_n == len(llm.chat_prompt_ids([{"role": "user", "content": TEXT}]))
    assert counted["special_tokens"] > 0 and counted["text_tokens"] < counted["prompt_tokens"]
    path = tmp_path / "t.txt"
    path.write_text(TEXT, encoding="utf-8")
    flags = ["--tiny"] if which == "tiny" else []
    code, plain = _cli(capsys, str(path), *flags)
    assert code == 0 and plain["prompt_tokens"] == plain_n and plain["window"] == window
    assert plain["characters"] == len(TEXT)
    code, chat = _cli(capsys, str(path), "--chat", *flags)
    assert code == 0 and chat["prompt_tokens"] == chat_n


def test_exit_code_1_when_it_does_not_fit(tiny, tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text(TEXT, encoding="utf-8")
    n = count(TEXT, tiny.tokenizer, 512)["prompt_tokens"]
    code, fits = _cli(capsys, str(path), "--tiny", "--max-tokens", str(512 - n))
    assert code == 0 and fits["fits"] and fits["room_left"] == 0
    code, over = _cli(capsys, str(path), "--tiny", "--max-tokens", str(512 - n + 1))
    assert code == 1 and not over["fits"] and over["room_left"] == -1
    # The engine agrees at the boundary: max_tokens one more than the room is refused.
    ids = tiny.tokenizer.encode(TEXT)
    assert tiny.engine.prepare_prompt(ids, greedy(512 - n)) == (ids, 0)
    with pytest.raises(ContextLengthExceeded, match="maximum context length is 512"):
        tiny.engine.prepare_prompt(ids, greedy(512 - n + 1))
    code, small = _cli(capsys, str(path), "--tiny", "--max-model-len", str(n))
    assert code == 1 and not small["fits"]                          # a prompt filling the window leaves no room


def test_reads_stdin_and_prints_a_table(monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(TEXT))
    assert main(["count-tokens", "--tiny"]) == 0
    out = capsys.readouterr().out
    assert "prompt_tokens" in out and "window: 512" in out


@pytest.fixture(scope="module")
def gemma_and_qwen():
    from haltwise.models.catalog import resolve_model
    from haltwise.tokenizer.tokenizer import Tokenizer

    return (Tokenizer.from_gguf(resolve_model("gemma3-270m", progress=None)),
            Tokenizer.from_gguf(resolve_model("qwen2.5-coder-0.5b", progress=None)))


def test_count_with_sentencepiece_and_qwen(gemma_and_qwen, tmp_path):
    gemma, qwen = gemma_and_qwen
    counted = count(TEXT, gemma, 32768)
    assert counted["prompt_tokens"] == len(gemma.encode(TEXT)) == counted["text_tokens"] + 1  # + <bos>
    assert counted["special_tokens"] == 1
    with pytest.raises(ValueError, match="no chat template"):  # Gemma 3 270M is a base model
        count(TEXT, gemma, 32768, chat=True)
    chat = count(TEXT, qwen, 32768, chat=True)
    assert chat["prompt_tokens"] == len(qwen.encode(qwen.apply_chat_template([{"role": "user", "content": TEXT}]),
                                                   add_special_tokens=False))
    assert chat["special_tokens"] == 6  # 2 per system and user turn, the generation prompt, and TEXT's <|im_start|>


def test_chat_template_option(tmp_path, capsys):
    text_file = tmp_path / "t.txt"
    text_file.write_text("hello")
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}<|im_start|>{{ m['content'] }}{% endfor %}")
    code, out = _cli(capsys, str(text_file), "--tiny", "--chat", "--chat-template", str(template))
    from haltwise.tokenizer.tiny import tiny_tokenizer

    assert code == 0 and out["prompt_tokens"] == len(tiny_tokenizer().encode("<|im_start|>hello",
                                                                              add_special_tokens=False))
    assert out["special_tokens"] == 1
    template.write_text("{% for %}")
    with pytest.raises(SystemExit):  # argparse: a template that does not compile is a usage error
        main(["count-tokens", str(text_file), "--tiny", "--chat", "--chat-template", str(template)])
    assert "does not compile" in capsys.readouterr().err
