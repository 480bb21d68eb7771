"""Sample texts for the tokenizer tests (a plain module: tests import it by name)."""

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
from haltwise_bench.common import longtext_files

LONGTEXT = next(str(p) for p in longtext_files() if p.name == "tempest_gut.txt")

MIXED_TEXT = (
    "Hello, world! It's 2024-06-01; the price is $1,234.56 (about €1.1k). I'm sure they'll've done it.\n"
    "    def f(x):\n\t\treturn {'a': [1, 2, 3], \"b\": x ** 2}  # comment\r\n"
    "if (a && b || !c) { printf(\"%d\\n\", a->b); }\n\n\n"
    "中文分词测试：我们今天去公园散步，天气很好。日本語のテキストも少し。한국어도 조금.\n"
    "Emoji: 🙂🚀👩‍👩‍👧‍👦 🇫🇷 ❤️ — em-dash … ellipsis «quotes» ‘single’ “double”\n"
    "Whitespace runs:   three   spaces,\t\ttabs,\n\n\nnewlines,    \n  trailing   \n"
    "Numbers 1234567890 3.14159 0x1F 1e-9 -42 +7 100000000000\n"
    "URLs https://example.com/path?q=1&r=2#frag and emails someone@example.org.\n"
    "Mixed-case CamelCaseWords snake_case_words kebab-case-words ALLCAPS MiXeD.\n"
    "Accents: café naïve résumé Zürich São Paulo Ångström. Greek: αβγδ ΣΩ. Cyrillic: Привет мир.\n"
    "Spacing before punctuation: hello . world , it 's don 't ? ! ; and n't .\n"
    "Math ∑ ∫ √ ≤ ≥ ≠ ∞ π; arrows → ← ↔; box ┌─┐ │ └─┘.\n"
)

# Edge cases of SentencePiece vocabularies: spaces, special-token text of several families, byte fallback.
SENTENCEPIECE_TEXTS = ["", " ", "  Hello  world ", "\n\n\nx\n", "<start_of_turn>user\n\n\nhi<end_of_turn>  <table>",
                       "<bos>a<eos><pad>", "[INST] hi [/INST]</s><user_tok>", "<|begin_of_text|>x<|eot_id|><think>y",
                       "𓀀 𝔘 \u0007 ☕ 中文"]
