"""Chat template rendering against transformers' apply_chat_template, and message validation."""
from __future__ import annotations

import pytest

from haltwise.tokenizer.chat import ChatTemplate

CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Tell me a joke."}, {"role": "assistant", "content": "Why did the..."},
     {"role": "user", "content": "Another, in 中文 🙂\nwith two lines."}],
    [{"role": "system", "content": ""}, {"role": "user", "content": "  spaces  \n\n"},
     {"role": "assistant", "content": "<|im_end|> typed by a user"}],
]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_render_matches_transformers(smol, hf_smol, messages, add_generation_prompt):
    ours = smol.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    theirs = hf_smol.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert ours == theirs
    # Token count of a chat: encode without added specials, as apply_chat_template(tokenize=True) does.
    ids = hf_smol.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt,
                                      return_dict=False)
    assert smol.encode(ours, add_special_tokens=False) == list(ids)


def test_default_system_message_only_without_system(smol):
    text = smol.apply_chat_template([{"role": "user", "content": "x"}])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith("<|im_start|>assistant\n")
    text = smol.apply_chat_template(CONVERSATIONS[1], add_generation_prompt=False)
    assert "SmolLM" not in text and text.endswith("<|im_end|>\n")


def test_text_parts_are_joined(smol):
    parts = [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]
    assert smol.apply_chat_template(parts) == smol.apply_chat_template([{"role": "user", "content": "one\ntwo"}])


@pytest.mark.parametrize("messages", [
    [],
    "hello",
    [{"content": "no role"}],
    [{"role": "user"}],
    [{"role": "user", "content": None}],
    [{"role": "user", "content": 42}],
    [{"role": 3, "content": "x"}],
    ["not a dict"],
    [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
    [{"role": "user", "content": [{"type": "text", "text": 5}]}],
])
def test_malformed_messages_raise_value_error(smol, messages):
    with pytest.raises(ValueError):
        smol.apply_chat_template(messages)


def test_raise_exception_and_tojson():
    template = ("{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
                "{{ messages | tojson }}{{ bos_token }}")
    chat = ChatTemplate(template, {"bos_token": "<s>", "eos_token": None})
    assert chat.render([{"role": "user", "content": "<b>é</b>"}]) == \
        '[{"role": "user", "content": "<b>é</b>"}]<s>'
    with pytest.raises(ValueError, match="first must be user"):
        chat.render([{"role": "assistant", "content": "x"}])


def test_sandbox_blocks_attribute_escape():
    chat = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ValueError):
        chat.render([{"role": "user", "content": "x"}])


def test_template_syntax_error_is_value_error():
    with pytest.raises(ValueError, match="does not compile"):
        ChatTemplate("{% for m in messages %}")


def test_trim_and_lstrip_blocks():
    chat = ChatTemplate("{% for m in messages %}\n    {{ m['content'] }}\n{% endfor %}")
    assert chat.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "    a\n    b\n"


# ---- real templates from the other catalog models -------------------------------------------------------------
QWEN_TWO_TURNS = [
    {"role": "system", "content": "You write Python."},
    {"role": "user", "content": "Reverse a list."},
    {"role": "assistant", "content": "Use `xs[::-1]`."},
    {"role": "user", "content": "And in place? 中文 🙂"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
TOOL_CALL_TURNS = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": '{"temp_c": 21}'},
]


def _transformers_render(tok, messages, add_generation_prompt=True, **kw) -> str:
    """transformers' own renderer (what apply_chat_template(tokenize=False) calls), with the same special tokens."""
    from transformers.utils.chat_template_utils import render_jinja_template

    specials = {k: v for k, v in tok.chat_template.special_tokens.items()}
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=tok.chat_template.source,
                                        add_generation_prompt=add_generation_prompt, **specials, **kw)
    return rendered[0]


@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("messages", [QWEN_TWO_TURNS, QWEN_TWO_TURNS[1:], CONVERSATIONS[2], TOOL_CALL_TURNS])
def test_qwen_template_renders_as_transformers(qwen, messages, add_generation_prompt):
    ours = qwen.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    assert ours == _transformers_render(qwen, messages, add_generation_prompt)
    assert ours.endswith("<|im_start|>assistant\n") == add_generation_prompt


def test_qwen_template_with_tools_renders_as_transformers(qwen):
    ours = qwen.apply_chat_template(TOOL_CALL_TURNS, tools=TOOLS)
    assert ours == _transformers_render(qwen, TOOL_CALL_TURNS, tools=TOOLS)
    assert '"name": "get_weather"' in ours and "<tool_response>" in ours
    assert "# Tools" not in qwen.apply_chat_template(TOOL_CALL_TURNS)  # tools default to None: branch off


def test_qwen_default_system_message(qwen):
    text = qwen.apply_chat_template([{"role": "user", "content": "x"}])
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                    "<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n")
    ids = qwen.encode(text, add_special_tokens=False)
    assert ids[0] == 151644 and ids.count(151645) == 2  # <|im_start|> ... two <|im_end|>, no BOS


def test_gemma_base_has_no_template_and_says_what_to_do(gemma):
    assert gemma.chat_template is None
    with pytest.raises(ValueError, match="no chat template.*--chat-template FILE"):
        gemma.apply_chat_template([{"role": "user", "content": "hi"}])


def test_supplied_template_for_gemma(gemma, tmp_path):
    from haltwise.tokenizer.chat import load_chat_template

    path = tmp_path / "gemma.jinja"
    path.write_text("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' "
                    "else m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
                    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
    tok = __import__("copy").copy(gemma)
    tok.set_chat_template(load_chat_template(str(path)))
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n"
    assert tok.encode(text, add_special_tokens=False)[:2] == [2, 105]  # <bos>, <start_of_turn> as tokens
    assert gemma.chat_template is None  # the shared tokenizer is untouched


def test_load_chat_template_from_json_and_errors(tmp_path):
    from haltwise.tokenizer.chat import load_chat_template

    (tmp_path / "c.json").write_text('{"chat_template": "{{ messages[0].content }}"}')
    assert load_chat_template(str(tmp_path / "c.json")) == "{{ messages[0].content }}"
    (tmp_path / "bad.jinja").write_text("{% for %}")
    with pytest.raises(ValueError, match="does not compile"):
        load_chat_template(str(tmp_path / "bad.jinja"))
    with pytest.raises(OSError):
        load_chat_template(str(tmp_path / "missing.jinja"))


def test_generation_block_and_none_tools():
    chat = ChatTemplate("{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
                        "{% if tools is not none %}TOOLS{% endif %}")
    assert chat.render([{"role": "user", "content": "a"}]) == "[a]"
    assert chat.render([{"role": "user", "content": "a"}], tools=[]) == "[a]TOOLS"
