"""Request-side reasoning settings of every chat surface -> a reasoning budget and chat-template arguments.

Budgets (max reasoning tokens; the engine closes the think section after that many, stopping/reasoning.py):

    reasoning_effort   none  minimal  low   medium  high      (OpenAI chat `reasoning_effort`,
    budget (tokens)    0     256      1024  4096    16384      Responses `reasoning.effort`)

`max_reasoning_tokens` (haltwise extension) and Anthropic's `thinking.budget_tokens` give the number
directly; an explicit number wins over an effort. No setting = no budget (max_tokens still counts
reasoning and answer together, as in vLLM). Budget 0 closes the section as soon as it opens.
Anthropic `thinking: {"type": "disabled"}` renders the template with enable_thinking false (Qwen3 then
writes an empty, closed section into the prompt) and sets budget 0 for templates that ignore it.
On a model whose template never opens a think section all of this is accepted and changes nothing
(as vLLM does with reasoning_effort on a non-reasoning model).

`chat_template_kwargs` (vLLM's extension, e.g. {"enable_thinking": false}) are passed to the template;
names the server itself sets (messages, tools, add_generation_prompt, ...) are a 400. An effort is also
passed to the template as `reasoning_effort`; effort "none" also sets enable_thinking false (unless given).
"""
from __future__ import annotations

from typing import Any

from haltwise.sampling_params import ParamError

EFFORT_BUDGETS = {"none": 0, "minimal": 256, "low": 1024, "medium": 4096, "high": 16384}
# Variables and functions the server or Jinja provide to every template (overriding one could break it).
RESERVED_TEMPLATE_NAMES = frozenset({"messages", "tools", "documents", "add_generation_prompt",
                                     "bos_token", "eos_token", "unk_token", "pad_token",
                                     "raise_exception", "strftime_now",
                                     "range", "dict", "lipsum", "cycler", "joiner", "namespace"})


def reasoning_budget(effort: str | None, max_reasoning_tokens: int | None,
                     param: str = "reasoning_effort") -> int | None:
    """The budget in tokens (None = none): an explicit number wins, else the effort's documented budget."""
    if max_reasoning_tokens is not None:
        return max_reasoning_tokens
    if effort is None:
        return None
    if effort not in EFFORT_BUDGETS:
        raise ParamError(param, f"{param} must be one of {', '.join(EFFORT_BUDGETS)}, got {effort!r}")
    return EFFORT_BUDGETS[effort]


def template_kwargs(chat_template_kwargs: dict[str, Any] | None, effort: str | None = None,
                    param: str = "chat_template_kwargs") -> dict[str, Any]:
    """Extra chat-template variables: the caller's (checked) plus `reasoning_effort` when one was given."""
    kwargs = dict(chat_template_kwargs or {})
    reserved = sorted(RESERVED_TEMPLATE_NAMES & kwargs.keys())
    if reserved:
        raise ParamError(param, f"{param} must not set {', '.join(reserved)} (the server sets it)")
    if "enable_thinking" in kwargs and not isinstance(kwargs["enable_thinking"], bool):
        raise ParamError(param, "chat_template_kwargs.enable_thinking must be true or false")
    if effort is not None:
        kwargs.setdefault("reasoning_effort", effort)
    if effort == "none":
        kwargs.setdefault("enable_thinking", False)
    return kwargs


def thinking_settings(enabled: bool | None, budget_tokens: int | None) -> tuple[int | None, dict[str, Any]]:
    """Anthropic `thinking` -> (budget, template kwargs). None = not given: the template's default."""
    if enabled is None:
        return None, {}
    if not enabled:
        return 0, {"enable_thinking": False}
    return budget_tokens, {"enable_thinking": True}
