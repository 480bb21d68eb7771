"""One disk entry: a fixed header, then the block payload; a checksum covers the key and the bytes.

    offset  size  field
         0     4  magic b"HWPC"
         4     4  FORMAT_VERSION (uint32, little endian)
         8    32  namespace (identity.py)
        40    16  chain hash (prefix_chain.chain_hash)
        56     8  payload length (uint64)
        64    32  blake2b-256 over bytes 0..63 and the payload
        96     n  payload (block_bytes.py)

The file's name is entry_name(namespace, chain): an entry whose header names another key is foreign. A
file shorter or longer than 96 + n is truncated (or corrupt); a checksum mismatch is corrupt. Every such
entry raises BadEntry and is never loaded.
"""
from __future__ import annotations

import hashlib
import struct

from haltwise.engine.prompt_cache.identity import FORMAT_VERSION

MAGIC = b"HWPC"
_FIXED = struct.Struct("<4sI32s16sQ")
HEADER_BYTES = _FIXED.size + 32
SUFFIX = ".kvb"


class BadEntry(ValueError):
    """A corrupt, truncated or foreign entry (the message says which)."""


def entry_name(namespace: bytes, chain: bytes) -> str:
    return hashlib.sha256(namespace + chain).hexdigest()[:40] + SUFFIX


def encode(namespace: bytes, chain: bytes, payload: bytes) -> bytes:
    fixed = _FIXED.pack(MAGIC, FORMAT_VERSION, namespace, chain, len(payload))
    digest = hashlib.blake2b(fixed, digest_size=32)
    digest.update(payload)
    return fixed + digest.digest() + payload


def read_header(header: bytes, file_name: str, file_size: int) -> tuple[bytes, bytes, int]:
    """(namespace, chain, payload length) of a file's first HEADER_BYTES; BadEntry when they cannot be right."""
    if len(header) < HEADER_BYTES:
        raise BadEntry(f"truncated: {len(header)} bytes, shorter than the header")
    magic, version, namespace, chain, length = _FIXED.unpack_from(header)
    if magic != MAGIC:
        raise BadEntry("not a prompt-cache entry (bad magic)")
    if version != FORMAT_VERSION:
        raise BadEntry(f"entry format {version}, this build reads {FORMAT_VERSION}")
    if entry_name(namespace, chain) != file_name:
        raise BadEntry("foreign: its header names another key than its file name")
    if file_size != HEADER_BYTES + length:
        raise BadEntry(f"truncated: {file_size} bytes, the header says {HEADER_BYTES + length}")
    return namespace, chain, length


def decode(data: bytes, namespace: bytes, chain: bytes, file_name: str) -> bytes:
    """The payload of a whole entry file expected to hold (namespace, chain); BadEntry otherwise."""
    got_ns, got_chain, length = read_header(data[:HEADER_BYTES], file_name, len(data))
    if (got_ns, got_chain) != (namespace, chain):
        raise BadEntry("foreign: the entry holds another key")
    digest = hashlib.blake2b(data[:_FIXED.size], digest_size=32)
    payload = data[HEADER_BYTES:]
    digest.update(payload)
    if digest.digest() != data[_FIXED.size:HEADER_BYTES]:
        raise BadEntry("corrupt: checksum mismatch")
    return payload
