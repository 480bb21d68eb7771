"""A tiny real byte-level BPE tokenizer for fast tests (with a tiny random model).

    id 0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|>   (special, like SmolLM2)
    ids 3..258: the 256 single bytes
    ids 259..TINY_VOCAB_SIZE-1: merges learned in-process from a fixed text

Trained with `tokenizers`' BpeTrainer on a fixed corpus, so it is deterministic; building takes
milliseconds. ChatML chat template as in SmolLM2 (without the default system message).
"""
from __future__ import annotations

from tokenizers import AddedToken
from tokenizers import Tokenizer as _HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from haltwise.tokenizer.tokenizer import Tokenizer

TINY_VOCAB_SIZE = 512
TINY_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_CORPUS = (
    "The quick brown fox jumps over the lazy dog. A stop sequence ends the text at exactly the right "
    "character, and the server names the reason: eos, a stop string, a limit or a deadline.\n"
    "Hello, world! Hello there. How are you today? I am fine, thank you, and you?\n"
    "def generate(prompt, max_tokens=16):\n    tokens = encode(prompt)\n    return decode(tokens)\n"
    "for i in range(10):\n    print(i, i * i)\n"
    '{"role": "user", "content": "Write a haiku about the sea."}\n'
    "Once upon a time there was a little model that learned to stop when it was done.\n"
    "Café, naïve, résumé, Zürich. 你好，世界。こんにちは。Привет, мир! 🙂🚀\n"
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100, 1000. ### Heading\n\n- item one\n- item two\n"
)


def tiny_tokenizer(chat_template: str = CHATML_TEMPLATE, added_tokens: tuple[str, ...] = ()) -> Tokenizer:
    """A fresh deterministic tiny byte-level BPE Tokenizer (vocab TINY_VOCAB_SIZE, eos set {0, 2}).

    added_tokens: extra non-special single tokens after the learned vocabulary (e.g. Qwen3's "<think>",
    "</think>": one token each, kept in decoded text, as in Qwen3's tokenizer.json).
    """
    backend = _HFTokenizer(models.BPE(fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE, min_frequency=2, show_progress=False,
        special_tokens=list(TINY_SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(_CORPUS.splitlines(keepends=True) * 4, trainer=trainer)
    if added_tokens:
        backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in added_tokens])
    return Tokenizer(backend, bos_token="<|im_start|>", eos_token="<|im_end|>", chat_template=chat_template)
