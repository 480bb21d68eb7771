"""The texts the tokenizer oracle fixtures cover (a few thousand characters per family).

Used only by make_oracle_fixtures.py: the fixtures store the texts themselves, so the tests need
neither this corpus's sources nor transformers.
"""
from __future__ import annotations

from tests.tokenizer.tokenizer_samples import LONGTEXT, MIXED_TEXT

CODE = '''\
import asyncio
from dataclasses import dataclass, field


@dataclass
class Request:
    prompt: str
    max_tokens: int = 16
    stop: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


async def main() -> int:
    async with asyncio.timeout(2.5):
        await asyncio.sleep(0)
    return 0x7F & ~0b1010  # bit ops
\tindented_with_tab = {"k": [1, 2, 3], 'v': None}
SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%ann%';
fn main() { let v: Vec<u8> = (0..10).map(|x| x * 2).collect(); println!("{:?}", v); }
'''

CHINESE = ("人工智能（AI）是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能相似的方式做出"
           "反应的智能机器。该领域的研究包括机器人、语言识别、图像识别、自然语言处理和专家系统等。\n"
           "“你好！”他说。「引用」『二重』【括号】——破折号……省略号。数字：１２３，ＡＢＣ。繁體字：龍鳳與學習。\n")

EMOJI_AND_RARE = ("Emoji: 😀😃😄😁 👍🏽 👨‍💻 🧑🏿‍🚀 🏳️‍🌈 🇯🇵🇺🇸 🫠 🪿 ✈︎ ✈️ ☕\n"
                  "Rare scripts (byte fallback): 𐌀𐌁𐌂 𓀀𓀁 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꦲꦏ ᚠᚢᚦ ⠓⠑⠇⠇⠕ \u0007\u001b[0m \ufeffBOM\n"
                  "Combining: e\u0301 a\u0308 n\u0303 \u1100\u1161\u11a8 Z\u0351\u0353\u0354\n")

WHITESPACE = ("Runs:  two   three    four     five\n\n\nthree newlines\n\n\n\n\n\nsix\t\ttabs\t \t mixed\r\n"
              "crlf\r\n\r\n  leading spaces\n        eight spaces\n" + " " * 33 + "33 spaces\n"
              "trailing   \n \n  \n   \n" + "\n" * 40 + "forty newlines, then a lone space: ")


def oracle_texts() -> dict[str, str]:
    """name -> text; about 7k characters in all, plus special-token texts per family in the script."""
    with open(LONGTEXT, encoding="utf-8") as f:
        play = f.read()[30000:32500]
    return {"mixed": MIXED_TEXT, "code": CODE, "chinese": CHINESE, "emoji_rare": EMOJI_AND_RARE,
            "whitespace": WHITESPACE, "english_play": play, " leading space": "  Hello world  ",
            "empty": "", "single space": " "}
