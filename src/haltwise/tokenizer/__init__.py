"""The model's own tokenizer: encode/decode, special tokens and eos set, chat template, streaming decode."""
from haltwise.tokenizer.chat import ChatTemplate
from haltwise.tokenizer.detokenizer import IncrementalDetokenizer
from haltwise.tokenizer.tiny import tiny_tokenizer
from haltwise.tokenizer.tokenizer import Tokenizer

__all__ = ["ChatTemplate", "IncrementalDetokenizer", "Tokenizer", "tiny_tokenizer"]
