"""`stop_presets: ["auto"]`: a small rule classifier that picks structural presets from what is asked.

It reads the last user turn (chat) or the prompt (completions) and applies the first rule that
fires, in this order (case-insensitive, on whole words):

  rule   fires when the text ...                                          presets
  json   mentions JSON                                                    json
  code   has a ``` fence or says "code", or asks to write/show/implement   code_block
         a function/script/program/... or something in a named language
  list   asks for a list: "list", "bulleted", "numbered", "one per line",  paragraph
         "enumerate", "bullet points"
  line   asks for brevity ("one sentence", "one word", "only the number",  line
         "give only", "briefly", ...) or is one short question (<= 20
         words) opening with what/who/when/where/which/how many/much/...
  (none) anything else                                                    ()

The classifier never reads the model's output and costs a few regex searches per request. Its
choice and the rule that made it are reported in every termination detail as
"auto -> json: mentions JSON". Under a grammar the json preset is a no-op (the grammar ends the
JSON), which the report says.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Sequence

from haltwise.sampling_params import SamplingParams

_I = re.IGNORECASE
_JSON = re.compile(r"\bjson\b", _I)
_FENCE_OR_CODE = re.compile(r"```|\bcode\b|\bcodeblock\b", _I)
_CODE_NOUN = re.compile(r"\b(function|functions|script|program|snippet|method|regex|query|command|"
                        r"loop|one-liner|implementation)\b", _I)
_CODE_VERB = re.compile(r"\b(write|show|implement|create|give|print|define|fix|refactor)\b", _I)
_LANGUAGE = re.compile(r"\b(python|javascript|typescript|java|rust|golang|bash|shell|sql|html|css|c\+\+|"
                       r"kotlin|swift|ruby|php|haskell|perl|lua)\b", _I)
_LIST = re.compile(r"\b(list|bulleted|bullet points?|numbered|enumerate|itemi[sz]e)\b|one per line", _I)
_BRIEF = re.compile(r"\b(one|a single|1) (sentence|word|line|number)\b|\bonly the\b|\bgive only\b|\bbriefly\b|"
                    r"\bin a word\b|\bshort answer\b|\bjust the\b", _I)
_FACT_OPENER = re.compile(r"^\W*(what|who|whom|whose|when|where|which|name|translate|"
                          r"how (many|much|old|far|long|tall|big))\b", _I)
MAX_SHORT_QUESTION_WORDS = 20


@dataclass(frozen=True)
class Intent:
    """The presets chosen and the rule that chose them (rule text is shown to users)."""

    presets: tuple[str, ...]
    rule: str

    def report(self, grammar: bool = False) -> str:
        chosen = ",".join(self.presets) or "none"
        noop = " (no-op under a grammar)" if grammar and "json" in self.presets else ""
        return f"auto -> {chosen}: {self.rule}{noop}"


def classify(text: str) -> Intent:
    """Structural presets for a request whose last user turn (or prompt) is `text`."""
    if _JSON.search(text):
        return Intent(("json",), "mentions JSON")
    if _FENCE_OR_CODE.search(text):
        return Intent(("code_block",), "asks for code")
    if _CODE_VERB.search(text) and (_CODE_NOUN.search(text) or _LANGUAGE.search(text)):
        return Intent(("code_block",), "asks to write code")
    if _LIST.search(text):
        return Intent(("paragraph",), "asks for a list")
    if _BRIEF.search(text):
        return Intent(("line",), "asks for a short answer")
    stripped = text.strip()
    if ("\n" not in stripped and stripped.count("?") == 1 and stripped.endswith("?")
            and len(stripped.split()) <= MAX_SHORT_QUESTION_WORDS and _FACT_OPENER.search(stripped)):
        return Intent(("line",), "a one-line factual question")
    return Intent((), "no structure asked for")


def classify_many(texts: Sequence[str | None]) -> Intent:
    """One choice for a request with several prompts: the common one, else none."""
    if not texts or any(t is None for t in texts):
        return Intent((), "no prompt text (token ids)")
    intents = {classify(t) for t in texts if t is not None}
    if len({i.presets for i in intents}) == 1:
        only = next(iter(intents))
        return only if len(intents) == 1 else Intent(only.presets, "all prompts agree")
    return Intent((), "the prompts disagree")


def resolve_auto(params: SamplingParams, texts: Sequence[str | None]) -> SamplingParams:
    """params with "auto" in stop_presets replaced by the classifier's presets (and its report kept)."""
    if "auto" not in params.stop_presets:
        return params
    intent = classify_many(texts)
    presets = tuple(dict.fromkeys([p for p in params.stop_presets if p != "auto"] + list(intent.presets)))
    return dataclasses.replace(params, stop_presets=presets,
                               auto_presets=intent.report(grammar=params.structured_outputs is not None))
