"""The mapped GGUF reader against the gguf library's own reader, and on crafted files."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from haltwise.gguf.file import GGUFFile, StringArray, read_gguf_metadata
from haltwise.models.loader import default_model_path


@pytest.fixture(scope="module")
def gguf_path() -> str:
    return str(default_model_path())


def test_tensors_match_gguf_library(gguf_path):
    import gguf

    theirs = gguf.GGUFReader(gguf_path).tensors
    ours = GGUFFile(gguf_path).tensors
    assert [t.name for t in ours] == [t.name for t in theirs]
    for o, t in zip(ours, theirs):
        assert o.tensor_type == t.tensor_type and list(o.shape) == t.shape.tolist(), t.name
        assert o.data.dtype == t.data.dtype, t.name                     # float32 elements or raw bytes
        assert np.array_equal(o.data.view(np.uint8), np.asarray(t.data).reshape(-1).view(np.uint8)), t.name
        assert not o.data.flags.writeable                               # a view of the read-only map


def test_string_arrays_decode_lazily(gguf_path):
    tokens = GGUFFile(gguf_path).metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, StringArray) and tokens._decoded is None and len(tokens) == 49152
    assert tokens[0] == "<|endoftext|>" and tokens._decoded is not None


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


def _file(kv: bytes, n_kv: int, tensors: bytes = b"", n_tensors: int = 0, data: bytes = b"") -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kv + tensors
    return head + bytes(-len(head) % 32) + data


def _tensor(name: str, dims: tuple[int, ...], qtype: int, offset: int) -> bytes:
    k = name.encode()
    return (struct.pack("<Q", len(k)) + k + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
            + struct.pack("<IQ", qtype, offset))


def test_a_small_tensor_is_a_view_of_its_bytes(tmp_path):
    values = np.arange(6, dtype=np.float32)
    path = tmp_path / "t.gguf"
    path.write_bytes(_file(b"", 0, _tensor("w", (3, 2), 0, 0), 1, values.tobytes()))
    (t,) = GGUFFile(path).tensors
    assert t.name == "w" and t.shape == (3, 2) and np.array_equal(t.data, values)


@pytest.mark.parametrize("tensor, match", [
    (_tensor("w", (3, 2), 0, 64), "needs bytes"),              # data past the end of the file
    (_tensor("w", (3, 2), 99, 0), "unknown tensor type"),
    (_tensor("w", (3, 2, 1, 1, 1), 0, 0), "dimensions"),
    (_tensor("w", (31, 1), 8, 0), "multiple of Q8_0's block"),
])
def test_crafted_tensor_tables_are_refused(tmp_path, tensor, match):
    path = tmp_path / "bad.gguf"
    path.write_bytes(_file(b"", 0, tensor, 1, bytes(24)))
    with pytest.raises(ValueError, match=match):
        GGUFFile(path)


def test_a_string_array_longer_than_the_file_is_refused(tmp_path):
    body = _kv("a.arr", 9, struct.pack("<IQ", 8, 2) + struct.pack("<Q", 1) + b"x" + struct.pack("<Q", 1 << 40))
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body + bytes(16))
    with pytest.raises(ValueError, match="past the end"):
        GGUFFile(path)
