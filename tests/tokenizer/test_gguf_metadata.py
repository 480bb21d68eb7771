"""The fast GGUF metadata reader against the gguf library's full reader."""
from __future__ import annotations

import struct

import pytest

from haltwise.tokenizer.gguf_metadata import read_gguf_metadata


def test_matches_gguf_library(gguf_path):
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    ours = read_gguf_metadata(gguf_path)
    assert set(ours) == {k for k in reader.fields if not k.startswith("GGUF.")}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        theirs = field.contents()
        if isinstance(theirs, float):
            assert ours[key] == pytest.approx(theirs)
        else:
            assert ours[key] == theirs, key
    assert ours["tokenizer.ggml.pre"] == "smollm" and len(ours["tokenizer.ggml.tokens"]) == 49152


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    k = key.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + payload


def test_small_synthetic_file(tmp_path):
    s = "héllo".encode()
    body = (_kv("a.u32", 4, struct.pack("<I", 7)) + _kv("a.bool", 7, b"\x01")
            + _kv("a.str", 8, struct.pack("<Q", len(s)) + s)
            + _kv("a.arr", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", -1, 0, 5))
            + _kv("a.f64", 12, struct.pack("<d", 0.5)))
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 5) + body)
    assert read_gguf_metadata(path) == {"a.u32": 7, "a.bool": True, "a.str": "héllo", "a.arr": [-1, 0, 5],
                                        "a.f64": 0.5}


def test_not_gguf(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"NOPE" + bytes(32))
    with pytest.raises(ValueError, match="not a GGUF"):
        read_gguf_metadata(path)
