"""Render a model's Jinja chat template exactly as transformers' `apply_chat_template(tokenize=False)`.

The template runs in jinja2's immutable sandbox with the environment transformers uses
(trim_blocks, lstrip_blocks, loop controls, a non-HTML-escaping `tojson`, `raise_exception`,
`strftime_now`, the `{% generation %}` block, which renders its body) and sees `messages`,
`add_generation_prompt`, `tools` and `documents` (None unless given, as transformers passes them, so
`{% if tools is not none %}` branches stay off) and the special-token strings (`bos_token`,
`eos_token`, `unk_token`, `pad_token`). An assistant message may carry `tool_calls` without content.

Token count of a chat: transformers' `apply_chat_template(tokenize=True)` encodes the rendered
text with add_special_tokens=False (the template writes any BOS itself), so a chat prompt is
`tokenizer.encode(rendered, add_special_tokens=False)`.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplate:
    """A compiled chat template plus the special-token strings it may refer to."""

    def __init__(self, template: str, special_tokens: Mapping[str, str | None] | None = None):
        """`special_tokens`: e.g. {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}; None values are dropped."""
        self.source = template
        self.special_tokens = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[loopcontrols, _GenerationBlock])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._compiled = env.from_string(template)
        except jinja2.TemplateSyntaxError as e:
            raise ValueError(f"chat template does not compile: {e}") from e

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
               **extra: Any) -> str:
        """The prompt text for `messages` (OpenAI chat format). ValueError for malformed messages.

        Content given as a list of {"type": "text", "text": ...} parts is joined with "\\n" first.
        `extra` is passed to the template (e.g. tools=...), overriding the special tokens.
        """
        chat = normalize_messages(messages)
        try:
            return self._compiled.render(messages=chat, add_generation_prompt=add_generation_prompt,
                                         **{"tools": None, "documents": None, **self.special_tokens, **extra})
        except jinja2.TemplateError as e:
            # raise_exception() in a template is how it rejects a conversation (e.g. roles out of order).
            raise ValueError(f"chat template rejected the messages: {e}") from e


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Validated plain-dict copies of `messages`: role and string content required; None-valued keys dropped."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError("messages must be a list of message objects")
    if not messages:
        raise ValueError("messages must not be empty")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{i}] must be an object, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}].role must be a non-empty string, got {role!r}")
        plain = {k: v for k, v in message.items() if v is not None}
        if message.get("content") is not None:
            plain["content"] = _content_text(message["content"], i)
        elif not (role == "assistant" and message.get("tool_calls")):
            raise ValueError(f"messages[{i}].content is required")
        out.append(plain)
    return out


def _content_text(content: Any, i: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError(f"messages[{i}].content[{j}] must be {{\"type\": \"text\", \"text\": <string>}}")
            texts.append(part["text"])
        return "\n".join(texts)
    raise ValueError(f"messages[{i}].content must be a string or a list of text parts, got {type(content).__name__}")


def load_chat_template(path: str) -> str:
    """A chat template from a file (a .jinja text, or a tokenizer_config.json-style JSON with "chat_template")."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        template = json.loads(text).get("chat_template")
        if not isinstance(template, str):
            raise ValueError(f"{path}: no \"chat_template\" string in this JSON file")
        text = template
    ChatTemplate(text)  # compiles, or ValueError naming the syntax error
    return text


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` (marks assistant text for training masks): renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # Unlike jinja's built-in tojson this does not HTML-escape (transformers' behaviour).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)
