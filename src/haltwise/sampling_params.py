"""Per-request generation parameters, validated once at construction (vLLM-shaped)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from haltwise.structured.spec import StructuredOutputs, StructureError

MAX_STOP_STRINGS = 64      # more stop strings than this is a 400
MAX_STOP_STRING_LEN = 256  # characters per stop string
STOP_PRESETS = ("json", "line", "paragraph", "code_block", "turn", "auto")  # auto: stopping/intent.py
STOP_BOUNDARIES = ("prefix", "word")  # how stop strings match: anywhere, or only as whole words
MAX_PRIORITY = 2**31 - 1  # |priority| bound (an int32, as vLLM's protobuf-facing APIs)
MAX_LOGIT_BIAS = 100.0     # |bias| bound (OpenAI): -100 bans a token, +100 all but forces it


class ParamError(ValueError):
    """An invalid parameter; `param` names the offending field (OpenAI error `param`)."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class RepetitionDetection:
    """Loop detectors: the exact one stops when the tail repeats a pattern of 1..max_period tokens
    min_repeats times; the near-loop one (stopping/near_loops.py) when, over the last near_loop_window
    tokens, at most near_loop_max_novelty of the near_loop_ngram-grams are new. `tool_loops`: a tool call
    identical to one already answered in the conversation (or made earlier in the answer) is withheld and
    ends the request (reason tool_loop, toolcalls/loop_watch.py). `enabled` switches all three."""

    enabled: bool = True
    max_period: int = 64   # longest repeating pattern looked for, in tokens
    min_repeats: int = 4   # consecutive copies of the pattern that count as a loop
    min_tokens: int = 16   # a loop must cover at least this many tokens (avoids "!!!!" style false hits)
    near_loops: bool = True            # the near-loop detector (repeats that grow or drift)
    near_loop_ngram: int = 4           # n-gram length compared
    near_loop_window: int = 64         # tokens looked back over; no verdict before this many
    near_loop_max_novelty: float = 0.35  # fires when at most this share of the window's n-grams is new
    tool_loops: bool = True            # withhold a tool call repeated after its result (reason tool_loop)

    def __post_init__(self) -> None:
        if self.max_period < 1 or self.min_repeats < 2 or self.min_tokens < 1:
            raise ParamError("repetition_detection", "max_period >= 1, min_repeats >= 2, min_tokens >= 1 required")
        if not (1 <= self.near_loop_ngram <= 32 and 2 <= self.near_loop_window <= 4096
                and 0.0 <= self.near_loop_max_novelty < 1.0):
            raise ParamError("repetition_detection", "near_loop_ngram in [1, 32], near_loop_window in [2, 4096] and "
                             "near_loop_max_novelty in [0, 1) required")


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0            # 0 = greedy
    top_p: float = 1.0                  # in (0, 1]
    top_k: int = -1                     # -1 or 0 = off
    min_p: float = 0.0                  # in [0, 1]
    seed: int | None = None             # same seed + same prompt = same output
    repetition_penalty: float = 1.0     # > 0; 1 = off (HF semantics: divide positive logits)
    frequency_penalty: float = 0.0      # in [-2, 2] (OpenAI semantics)
    presence_penalty: float = 0.0       # in [-2, 2]
    max_tokens: int | None = 16         # None = the rest of the context window
    min_tokens: int = 0                 # eos, stop tokens and stop strings ignored until this many tokens
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    stop_presets: tuple[str, ...] = ()  # structural stops: see STOP_PRESETS
    stop_boundary: str = "prefix"       # "word": a stop that starts/ends with a word char needs a boundary there
    auto_presets: str | None = None     # what stop_presets "auto" chose and why (set by intent.resolve_auto)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    repetition_detection: RepetitionDetection = field(default_factory=RepetitionDetection)
    timeout: float | None = None        # seconds from arrival; None = the engine default
    logprobs: int | None = None         # top logprobs per generated token
    # Logprobs of the prompt's own tokens (engine/prompt_logprobs.py), with this many top alternatives each;
    # the request then gets logits at every prompt position and no prefix-cache hit. None = off.
    prompt_logprobs: int | None = None
    truncate_prompt_tokens: int | None = None  # keep only the last N prompt tokens (explicit only)
    structured_outputs: StructuredOutputs | None = None  # grammar-constrained decoding (a dict is converted)
    tool_calls: Any = None              # toolcalls.constraint.ToolCallConstraint: how the text settles (set by a plan)
    # Reasoning (stopping/reasoning.py): split a think section from the answer where the model's template
    # opens one (chat surfaces set this); stops, grammars and loop detectors then act on the answer only.
    split_reasoning: bool = False
    max_reasoning_tokens: int | None = None  # reasoning budget: the engine closes the section after this many
    # Added to the raw logits of these token ids before the grammar mask and sampling (engine/sampler.py
    # says what wins against the termination layers); ids are checked against the vocabulary at admission.
    logit_bias: tuple[tuple[int, float], ...] = ()
    # Scheduling, not sampling (carried here as the request's one parameter object): vLLM's `priority`,
    # lower = sooner, under --scheduling-policy priority (engine/priority.py). Never changes the tokens.
    priority: int = 0

    def __post_init__(self) -> None:
        # The one place these are normalised (every edge hands them over as it got them): a string, a list or
        # None -> a tuple, so the dataclass stays hashable and immutable.
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop or ()))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids or ()))
        object.__setattr__(self, "stop_presets", tuple(self.stop_presets or ()))
        if isinstance(self.logit_bias, dict):
            object.__setattr__(self, "logit_bias", parse_logit_bias(self.logit_bias))
        object.__setattr__(self, "logit_bias", tuple(sorted(tuple(kv) for kv in self.logit_bias or ())))
        if isinstance(self.structured_outputs, dict):
            try:
                object.__setattr__(self, "structured_outputs", StructuredOutputs(**self.structured_outputs))
            except StructureError as e:
                raise ParamError(e.param, str(e)) from None
            except TypeError as e:
                raise ParamError("structured_outputs", str(e)) from None
        self._validate()

    def _validate(self) -> None:
        def need(ok: bool, param: str, message: str) -> None:
            if not ok:
                raise ParamError(param, message)

        need(_is_int(self.n) and self.n >= 1, "n", f"n must be an integer >= 1, got {self.n!r}")
        need(_is_num(self.temperature) and 0.0 <= self.temperature <= 2.0, "temperature",
             f"temperature must be in [0, 2], got {self.temperature!r}")
        need(_is_num(self.top_p) and 0.0 < self.top_p <= 1.0, "top_p", f"top_p must be in (0, 1], got {self.top_p!r}")
        need(_is_int(self.top_k) and self.top_k >= -1, "top_k", f"top_k must be -1 (off) or >= 0, got {self.top_k!r}")
        need(_is_num(self.min_p) and 0.0 <= self.min_p <= 1.0, "min_p", f"min_p must be in [0, 1], got {self.min_p!r}")
        need(self.seed is None or _is_int(self.seed), "seed", f"seed must be an integer, got {self.seed!r}")
        need(_is_num(self.repetition_penalty) and 0.0 < self.repetition_penalty <= 10.0, "repetition_penalty",
             f"repetition_penalty must be in (0, 10], got {self.repetition_penalty!r}")
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            need(_is_num(value) and -2.0 <= value <= 2.0, name, f"{name} must be in [-2, 2], got {value!r}")
        need(self.prompt_logprobs is None or (_is_int(self.prompt_logprobs) and 0 <= self.prompt_logprobs <= 20),
             "prompt_logprobs", f"prompt_logprobs must be an integer in [0, 20], got {self.prompt_logprobs!r}")
        scoring = self.prompt_logprobs is not None   # max_tokens 0: score the prompt, generate nothing
        need(self.max_tokens is None or (_is_int(self.max_tokens) and self.max_tokens >= (0 if scoring else 1)),
             "max_tokens", f"max_tokens must be an integer >= 1 (0 only for prompt scoring: echo with logprobs, "
             f"or prompt_logprobs), got {self.max_tokens!r}")
        need(_is_int(self.min_tokens) and self.min_tokens >= 0, "min_tokens",
             f"min_tokens must be an integer >= 0, got {self.min_tokens!r}")
        need(self.max_tokens is None or self.min_tokens <= self.max_tokens, "min_tokens",
             f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        need(len(self.stop) <= MAX_STOP_STRINGS, "stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(self.stop)}")
        for s in self.stop:
            need(isinstance(s, str), "stop", f"stop strings must be strings, got {s!r}")
            need(s != "", "stop", "stop strings must not be empty")
            need(len(s) <= MAX_STOP_STRING_LEN, "stop",
                 f"stop strings must be at most {MAX_STOP_STRING_LEN} characters, got {len(s)}")
        need(self.stop_boundary in STOP_BOUNDARIES, "stop_boundary",
             f"stop_boundary must be one of {', '.join(STOP_BOUNDARIES)}, got {self.stop_boundary!r}")
        for t in self.stop_token_ids:
            need(_is_int(t) and t >= 0, "stop_token_ids", f"stop_token_ids must be non-negative integers, got {t!r}")
        for p in self.stop_presets:
            need(p in STOP_PRESETS, "stop_presets", f"unknown stop preset {p!r}; known: {', '.join(STOP_PRESETS)}")
        need(self.timeout is None or (_is_num(self.timeout) and self.timeout > 0), "timeout",
             f"timeout must be a positive number of seconds, got {self.timeout!r}")
        need(self.logprobs is None or (_is_int(self.logprobs) and 0 <= self.logprobs <= 20), "logprobs",
             f"logprobs must be an integer in [0, 20], got {self.logprobs!r}")
        need(self.truncate_prompt_tokens is None or (_is_int(self.truncate_prompt_tokens)
                                                     and self.truncate_prompt_tokens >= 1),
             "truncate_prompt_tokens", f"truncate_prompt_tokens must be an integer >= 1, got {self.truncate_prompt_tokens!r}")
        need(self.max_reasoning_tokens is None or (_is_int(self.max_reasoning_tokens)
                                                   and self.max_reasoning_tokens >= 0),
             "max_reasoning_tokens", f"max_reasoning_tokens must be an integer >= 0, got {self.max_reasoning_tokens!r}")
        for token_id, bias in self.logit_bias:
            need(_is_int(token_id) and token_id >= 0, "logit_bias",
                 f"logit_bias keys must be token ids (non-negative integers), got {token_id!r}")
            need(_is_num(bias) and -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS, "logit_bias",
                 f"logit_bias[{token_id}] must be in [-100, 100], got {bias!r}")
        need(_is_int(self.priority) and -MAX_PRIORITY <= self.priority <= MAX_PRIORITY, "priority",
             f"priority must be an integer in [-{MAX_PRIORITY}, {MAX_PRIORITY}], got {self.priority!r}")
        need(self.structured_outputs is None or isinstance(self.structured_outputs, StructuredOutputs),
             "structured_outputs", "structured_outputs must be a StructuredOutputs (or a dict of its fields)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


def parse_logit_bias(bias: dict[Any, Any]) -> tuple[tuple[int, float], ...]:
    """OpenAI's {"token id as a string": bias} -> ((id, bias), ...) sorted by id; ParamError naming the key."""
    out = []
    for key, value in bias.items():
        text = key if isinstance(key, str) else str(key) if _is_int(key) else None
        if text is None or not text.strip().isdigit():
            raise ParamError("logit_bias", f"logit_bias keys must be token ids (non-negative integers as strings), "
                             f"got {key!r}")
        if not (_is_num(value) and -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS):
            raise ParamError("logit_bias", f"logit_bias[{key!r}] must be a number in [-100, 100], got {value!r}")
        out.append((int(text), float(value)))
    return tuple(sorted(out))


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x  # rejects NaN
