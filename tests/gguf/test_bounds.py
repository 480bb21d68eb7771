"""GGUF dimensions and counts are bounded before anything is allocated from them (gguf/bounds.py,
the tensor byte check in gguf/reader.py, the count checks in gguf/file.py): a crafted file
is a ModelLoadError (or ValueError for the metadata-only reader) naming what is wrong, never an
allocation of terabytes, a billion-layer loop or a crash. The files are written with gguf.GGUFWriter,
as tests/tokenizer/tiny_gguf.py writes its tokenizers."""
from __future__ import annotations

import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from haltwise.errors import ModelLoadError
from haltwise.models.loader import load_model
from haltwise.gguf.file import read_gguf_metadata

SANE = {"context_length": 256, "embedding_length": 64, "block_count": 2, "feed_forward_length": 128,
        "head_count": 4, "head_count_kv": 2, "vocab_size": 300}


def crafted(path: Path, tensor_rows: int = 4, **dims: int) -> Path:
    d = {**SANE, **dims}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(d["context_length"])
    w.add_embedding_length(d["embedding_length"])
    w.add_block_count(d["block_count"])
    w.add_feed_forward_length(d["feed_forward_length"])
    w.add_head_count(d["head_count"])
    w.add_head_count_kv(d["head_count_kv"])
    w.add_vocab_size(d["vocab_size"])
    w.add_token_list([f"t{i}" for i in range(8)])
    w.add_tensor("output_norm.weight", np.ones((tensor_rows, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("key,value", [
    ("context_length", 1 << 31),       # RoPE tables of 2^31 positions
    ("block_count", 10**9),            # a billion layers to construct
    ("embedding_length", 0),           # a division by zero (hidden // heads)
    ("head_count", 1 << 20),
    ("vocab_size", 1 << 31),
])
def test_an_absurd_dimension_is_a_clear_error_before_any_allocation(tmp_path, key, value):
    with pytest.raises(ModelLoadError, match=rf"{key} = {value} is outside 1\.\.\d+"):
        load_model(crafted(tmp_path / "bad.gguf", **{key: value}))


def test_dimensions_that_a_small_file_cannot_hold_are_refused(tmp_path):
    # each dimension is plausible, together they make 2^36 weights: 256 GB of float32 from a 2 KB file
    path = crafted(tmp_path / "big.gguf", vocab_size=1 << 20, embedding_length=1 << 16, head_count=64,
                   head_count_kv=64)
    with pytest.raises(ModelLoadError, match=r"more than a [\d,]+-byte file can hold"):
        load_model(path)


def test_heads_not_a_multiple_of_kv_heads_is_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="not a multiple of head_count_kv 3"):
        load_model(crafted(tmp_path / "kv.gguf", head_count=4, head_count_kv=3))


def _patch_u64_after(data: bytearray, marker: bytes, skip: int, value: int) -> None:
    at = data.index(marker) + len(marker) + skip
    data[at:at + 8] = struct.pack("<Q", value)


def test_a_metadata_array_count_beyond_the_file_is_refused_by_the_metadata_reader(tmp_path):
    path = crafted(tmp_path / "count.gguf")
    data = bytearray(path.read_bytes())
    # tokenizer.ggml.tokens: key string, u32 type (ARRAY), u32 element type, u64 count
    _patch_u64_after(data, b"tokenizer.ggml.tokens", 4 + 4, 1 << 60)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="array elements cannot fit"):
        read_gguf_metadata(path)


def test_a_tensor_shape_beyond_its_stored_bytes_is_refused(tmp_path):
    """A guard, not a new behaviour: the gguf library's reader already refuses this file when it opens it
    (open_gguf maps that to ModelLoadError); gguf_tensors' own byte check backs it up."""
    from haltwise.gguf import metadata as gguf_metadata, reader as gguf_reader

    path = crafted(tmp_path / "shape.gguf", tensor_rows=4)
    data = bytearray(path.read_bytes())
    # output_norm.weight info: name, u32 n_dims, u64 dims[0] (32), u64 dims[1] (4 rows) -> 4000 rows
    _patch_u64_after(data, b"output_norm.weight", 4 + 8, 4000)
    path.write_bytes(bytes(data))
    gguf_metadata._last_opened.clear()
    with pytest.raises(ModelLoadError):
        reader = gguf_reader.open_gguf(path)
        config = gguf_reader.gguf_config(reader, path)
        list(gguf_reader.gguf_tensors(reader, config, path))
