"""eval-stops' word-stop section: prefix (e) against whole-word (h) stop matching, on a scripted engine
whose stop strings are cut by the real matcher, and the shipped word-stop prompts."""
import re
from dataclasses import dataclass
from types import SimpleNamespace

from haltwise_bench import eval_stops
from haltwise_bench.eval_stops import STRATEGIES, StopPrompt, has_word_stop, load_prompt_set, strategy_params
from haltwise.stopping.stop_strings import StopStringMatcher

SCRIPTS = {  # what the scripted model "writes" for each prompt (eos at the end)
    "ws-weekend": "The weekend with a friend was fun.",      # "end" only inside words
    "ws-marker": "It was a legend. end",                      # the marker the prompt asks for, as a word
    "ws-whole": "Answer: the end of the road is near.",       # "end" as a word inside the answer
    "plain": "Hello there.\nUser: hi",                        # a non-word stop: both matchers agree
}
PROMPTS = [
    StopPrompt("ws-weekend", "word_stop", ({"role": "user", "content": "a"},), ("end",), (), {"type": "reply"}),
    StopPrompt("ws-marker", "word_stop", ({"role": "user", "content": "b"},), ("end",), (),
               {"type": "reply", "marker": "end"}),
    StopPrompt("ws-whole", "word_stop", ({"role": "user", "content": "c"},), ("end",), (), {"type": "reply"}),
    StopPrompt("plain", "chat", ({"role": "user", "content": "d"},), ("\nUser:",), ("turn",), {"type": "turn"}),
]


@dataclass
class _Engine:
    """Finishes every request in one step: eos at the script's end, or the real matcher's earliest cut."""

    scripts: dict[str, str]

    def __post_init__(self):
        self.pending = []

    def add_request(self, rid, ids, sp):
        text, reason = next(t for pid, t in self.scripts.items() if rid.endswith("-" + pid)), "eos"
        if sp.stop:
            m = StopStringMatcher(sp.stop, sp.stop_boundary)
            found = m.feed(text) + m.flush()
            if found:
                text, reason = text[:min(x.start for x in found)], "stop_string"
        if len(text) > sp.max_tokens:
            text, reason = text[:sp.max_tokens], "max_tokens"
        out = SimpleNamespace(token_ids=[ord(c) for c in text], text=text,
                              termination=SimpleNamespace(reason=SimpleNamespace(value=reason)))
        self.pending.append(SimpleNamespace(request_id=rid, finished=True, latency=0.1, outputs=[out]))

    def step(self):
        done, self.pending = self.pending, []
        return done


def _llm():
    engine = _Engine({p.id: SCRIPTS[p.id] for p in PROMPTS})
    return SimpleNamespace(engine=engine, chat_prompt_ids=lambda m: [1],
                           tokenizer=SimpleNamespace(decode=lambda ids: "".join(map(chr, ids))))


def test_word_section_counts_each_matchers_false_cuts():
    result = eval_stops.evaluate(_llm(), PROMPTS, list("beh"), 64, 5.0, lambda _: None)
    assert result["word_stop_prompts"] == ["ws-marker", "ws-weekend", "ws-whole"]  # not the "\nUser:" prompt
    rows = {r["strategy"]: r for r in result["word_stops"]}
    assert set(rows) == {"e", "h"}
    prefix, word = rows["e"], rows["h"]
    assert prefix["judged_prompts"] == word["judged_prompts"] == 3
    # prefix: "end" cuts "week|end" and "leg|end" before the answer ends; whole words cut only "the end of"
    assert sorted(prefix["false_cut_prompts"]) == ["ws-marker", "ws-weekend", "ws-whole"]
    assert prefix["false_cuts"] == 3 and prefix["false_cut_rate"] == 1.0 and prefix["completeness"] == 0.0
    assert word["false_cut_prompts"] == ["ws-whole"] and word["false_cuts"] == 1
    assert abs(word["completeness"] - 2 / 3) < 1e-9  # the marker prompt is complete: cut right at the marker
    gens = {g["prompt_id"]: g for g in result["generations"]["h"]}
    assert gens["ws-marker"]["text"] == "It was a legend. " and gens["ws-weekend"]["reason"] == "eos"
    # the whole table is unchanged where the stops are not words
    assert {g["prompt_id"]: g["text"] for g in result["generations"]["e"]}["plain"] == "Hello there."


def test_no_word_section_without_word_stops():
    result = eval_stops.evaluate(_llm(), PROMPTS[3:], list("beh"), 64, 5.0, lambda _: None)
    assert result["word_stop_prompts"] == [] and result["word_stops"] == []


def test_h_is_e_with_whole_word_stops():
    p = next(p for p in load_prompt_set() if p.kind == "word_stop")
    e, h = (strategy_params(s, p, 64, 5.0) for s in "eh")
    assert e.stop_boundary == "prefix" and h.stop_boundary == "word"
    assert (e.stop, e.stop_presets, e.timeout, e.repetition_detection) == (h.stop, h.stop_presets, h.timeout,
                                                                         h.repetition_detection)
    assert eval_stops.WORD_PAIR == ("e", "h") and set(eval_stops.WORD_PAIR) <= set(STRATEGIES)


def test_shipped_word_stop_prompts_have_word_stops_that_prefix_matching_can_miscut():
    prompts = load_prompt_set()
    words = [p for p in prompts if p.kind == "word_stop"]
    assert len(words) >= 6
    assert all(has_word_stop(p) and p.check["type"] == "reply" for p in words)
    assert [p.id for p in prompts if has_word_stop(p)] == [p.id for p in words]  # chat's "\nUser:" is no word
    # each prompt asks about a longer word holding its stop (humans, questions, weekend, ...)
    for p in words:
        longer = [w for w in re.findall(r"\w+", p.messages[-1]["content"].lower())
                  if any(s.lower() in w and s.lower() != w for s in p.stop)]
        assert longer, p.id
