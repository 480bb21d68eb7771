"""Whether a draft model's vocabulary is the target's: the same id for the same token, every id.

Drafts are token ids handed to the target unchanged, so "the same tokenizer" must hold id by id: the
same vocabulary size, the same token string (its bytes, for a byte-level BPE; its piece otherwise) at
every id, and the same added and special tokens (text, id, special or not). Merges and normalizers can
differ without harm: a draft is only ever a guess the target verifies, never a re-encoding of text.
"""
from __future__ import annotations

from haltwise.tokenizer.tokenizer import Tokenizer


def vocabulary_mismatch(target: Tokenizer, draft: Tokenizer) -> str:
    """"" when every id means the same token in both; otherwise the first difference, in words."""
    if target.vocab_size != draft.vocab_size:
        return f"{draft.vocab_size} tokens where the target has {target.vocab_size}"
    if target.is_byte_level != draft.is_byte_level:
        return "one vocabulary is byte-level BPE and the other is not"
    added_t, added_d = target.added_token_texts(), draft.added_token_texts()
    if added_t != added_d:
        diff = sorted(set(added_t.items()) ^ set(added_d.items()))[:3]
        return f"added tokens differ (e.g. {diff})"
    if target.special_token_ids != draft.special_token_ids:
        diff = sorted(target.special_token_ids ^ draft.special_token_ids)[:3]
        return f"special tokens differ (ids {diff})"
    for i in range(target.vocab_size):
        if target.id_to_token(i) != draft.id_to_token(i):
            return f"token {i} is {target.id_to_token(i)!r} in the target and {draft.id_to_token(i)!r} in the draft"
    return ""
