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
