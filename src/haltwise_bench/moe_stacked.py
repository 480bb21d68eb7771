"""A qwen3moe GGUF of many layers at Qwen3-30B-A3B's real shapes, made from a one-layer file's quantized tensors,
for `haltwise bench moe-large` (a model larger than the memory must start and answer).

`haltwise bench moe`'s files come from an f16 file through llama-quantize (moe_gguf.py); an f16 file of the 30+
layers that outgrow this host's memory would not fit its disk (~1.2 GB a layer). So the one-layer Q4_K_M file
that llama-quantize made is read with the `gguf` package, and its layer's tensors are written `layers` times
(blk.0 ... blk.N-1, the blocks byte for byte as llama-quantize wrote them), with the embedding, output norm and
head once and every metadata key copied (block_count set to `layers`). Tensor by tensor: memory stays at one.
Layers with the same weights still route differently (each sees the previous one's output).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from haltwise_bench.moe_gguf import ARCH, MoeShape, build, file_for


def stacked_file(shape: MoeShape, layers: int, quantize_bin: Path, log=print) -> Path:
    """The cached `layers`-layer file, made now from the one-layer Q4_K_M file if missing."""
    one = build(shape, 1, quantize_bin, log)
    if layers == 1:
        return one
    quantized = file_for(shape, layers)
    out = quantized.with_name(quantized.name.replace("-Q4_K_M", "-stacked-Q4_K_M"))
    if out.is_file():
        return out
    log(f"writing {out.name}: layer 0 of {one.name} x {layers} (gguf package)")
    partial = out.with_suffix(".partial")
    try:
        write_stacked(one, layers, partial)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.rename(out)
    return out


def write_stacked(source: Path, layers: int, out: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(out, ARCH)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue                                    # the writer's own (version, counts, architecture)
        value = layers if key == f"{ARCH}.block_count" else field.contents()
        array = field.types[0] == gguf.GGUFValueType.ARRAY
        writer.add_key_value(key, value, field.types[0], field.types[-1] if array else None)
    layer = [t for t in reader.tensors if t.name.startswith("blk.0.")]
    tensors = [(t.name, t) for t in reader.tensors if not t.name.startswith("blk.")]
    tensors += [(t.name.replace("blk.0.", f"blk.{i}.", 1), t) for i in range(layers) for t in layer]
    for name, t in tensors:
        data = np.asarray(t.data)
        writer.add_tensor_info(name, data.shape, data.dtype, int(data.nbytes), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for _, t in tensors:
        writer.write_tensor_data(np.asarray(t.data))
    writer.close()
