"""The byte-level BPE alphabet: each of the 256 byte values spelled as one printable character.

Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes
(controls, space, 0x7F-0xA0, 0xAD) are spelled U+0100, U+0101, ... in byte order. So " " is "Ġ"
(U+0120) and "\\n" is "Ċ" (U+010A). A token string in this alphabet maps back to its exact bytes.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

_PRINTABLE = frozenset([*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)])


def _build() -> tuple[str, ...]:
    spelled: list[str] = []
    extra = 0
    for b in range(256):
        if b in _PRINTABLE:
            spelled.append(chr(b))
        else:
            spelled.append(chr(256 + extra))
            extra += 1
    return tuple(spelled)


BYTE_TO_CHAR: tuple[str, ...] = _build()  # byte value (0..255) -> its one-character spelling
CHAR_TO_BYTE: Mapping[str, int] = MappingProxyType({c: b for b, c in enumerate(BYTE_TO_CHAR)})


def spell_bytes(data: bytes) -> str:
    """Bytes -> their byte-level spelling."""
    return "".join(BYTE_TO_CHAR[b] for b in data)


def token_string_to_bytes(token: str) -> bytes:
    """A token's string -> the bytes a ByteLevel decoder emits for it.

    As in the `tokenizers` ByteLevel decoder: if every character is in the alphabet, the mapped
    bytes; otherwise (e.g. an added token spelled with a real space) the token's own UTF-8.
    """
    try:
        return bytes(CHAR_TO_BYTE[c] for c in token)
    except KeyError:
        return token.encode("utf-8")
