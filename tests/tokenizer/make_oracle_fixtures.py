"""Writes tests/tokenizer/fixtures/<family>.json: transformers' token ids and decodes for the real GGUFs.

    PYTHONPATH=src python -m tests.tokenizer.make_oracle_fixtures [gemma3 qwen2]

transformers (AutoTokenizer.from_pretrained(dir, gguf_file=...)) is the oracle; building its Gemma
tokenizer takes from ~26 s to minutes, so the tests compare against these stored results and keep
one live run per family (marked slow). Each fixture records the GGUF's sha256 and the transformers
version it was made with.
"""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

from haltwise.models.catalog import CATALOG, resolve_model
from tests.tokenizer.oracle_texts import oracle_texts

FIXTURES = Path(__file__).with_name("fixtures")

# family -> (catalog name, texts with the family's special / added tokens)
FAMILIES: dict[str, tuple[str, list[str]]] = {
    "gemma3": ("gemma3-270m", [
        "<start_of_turn>user\nWrite a haiku.<end_of_turn>\n<start_of_turn>model\n",
        "<bos>text<eos> more <pad><unk><mask>",
        "<table><tr><th>x</th></tr></table> [multimodal] <start_of_image><end_of_image>",
        "almost special: <start_of_turn <end_of_turn> > <bos <unused0> <unused6241>",
    ]),
    "qwen2": ("qwen2.5-coder-0.5b", [
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
        '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
        "<|fim_prefix|>def f(x):<|fim_suffix|>    return y<|fim_middle|>",
        "a<|endoftext|>b <|im_end|> c<|im_start|> <|repo_name|>r<|file_sep|>f [PAD151700]",
    ]),
}


def hf_tokenizer(gguf: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def oracle_record(tok, texts: dict[str, str], seed: int = 0) -> dict:
    """Encodes (with and without special tokens), decodes of those, and decodes of cut/random id lists."""
    rng = random.Random(seed)
    encodes = []
    for name, text in texts.items():
        ids = tok.encode(text)
        plain = tok.encode(text, add_special_tokens=False)
        encodes.append({"name": name, "text": text, "ids": ids, "ids_no_special": plain,
                        "decode": tok.decode(ids, skip_special_tokens=True),
                        "decode_keep_special": tok.decode(ids, skip_special_tokens=False)})
    id_lists = []
    vocab = len(tok)
    for e in encodes:
        ids = e["ids"]
        if len(ids) > 4:  # cuts that can split byte-fallback runs and multibyte characters
            a = rng.randrange(len(ids) - 2)
            id_lists.append(ids[a:a + rng.randrange(1, 9)])
    id_lists += [[rng.randrange(vocab) for _ in range(rng.randrange(1, 12))] for _ in range(40)]
    decodes = [{"ids": ids, "skip": tok.decode(ids, skip_special_tokens=True),
                "keep": tok.decode(ids, skip_special_tokens=False)} for ids in id_lists]
    return {"encodes": encodes, "decodes": decodes}


def make(family: str) -> Path:
    import transformers

    model, special_texts = FAMILIES[family]
    gguf = resolve_model(model)
    start = time.perf_counter()
    tok = hf_tokenizer(gguf)
    build_s = time.perf_counter() - start
    texts = {**oracle_texts(), **{f"special{i}": t for i, t in enumerate(special_texts)}}
    record = {"family": family, "model": model, "gguf_sha256": CATALOG[model].sha256,
              "transformers": transformers.__version__, "vocab_size": len(tok),
              "bos_token": tok.bos_token, "eos_token": tok.eos_token, **oracle_record(tok, texts)}
    out = FIXTURES / f"{family}.json"
    FIXTURES.mkdir(exist_ok=True)
    out.write_text(json.dumps(record, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    print(f"{out}: {len(record['encodes'])} texts, {sum(len(t) for t in texts.values())} chars; "
          f"transformers built the tokenizer in {build_s:.1f}s")
    return out


if __name__ == "__main__":
    for fam in sys.argv[1:] or list(FAMILIES):
        make(fam)
