"""kv-estimate's numbers equal what the engine allocates for the same settings (SPEC §4)."""
import json

import pytest
import torch

from haltwise.cli import main
from haltwise.config import EngineConfig
from haltwise.engine.engine import LLMEngine
from haltwise.memory_size import parse_memory
from haltwise.llm import LLM
from haltwise.tools.kv_estimate import estimate

MEMORY = "37MiB"   # deliberately not a multiple of a block's bytes


def _allocated(engine):
    caches = engine.runner.kv_caches
    blocks = {t.shape[0] for pair in caches for t in pair}
    assert len(blocks) == 1
    return sum(t.numel() * t.element_size() for pair in caches for t in pair), blocks.pop()


def _check(engine, dtype, capsys, *model_flags):
    c = engine.model_config
    memory = parse_memory(MEMORY)
    e = estimate(c.num_layers, c.num_kv_heads, c.head_dim, dtype, 1000, 4, memory, 16)
    nbytes, blocks = _allocated(engine)
    assert (e["blocks_in_budget"], e["tokens_in_budget"]) == (blocks, engine.budget.num_tokens)
    assert e["blocks_in_budget"] * 16 * e["bytes_per_token"] == nbytes <= memory
    assert e["bytes_per_sequence"] == 63 * 16 * e["bytes_per_token"]   # 1000 tokens = 63 whole blocks
    argv = ["kv-estimate", *model_flags, "--dtype", dtype, "--memory", MEMORY, "--seq-len", "1000",
            "--batch", "4", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in e} == e
    assert set(out) - set(e) <= {"sliding_layers", "sliding_window"}  # only with the model's own config
    return e


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tiny(dtype, capsys):
    llm = LLM(tiny=True, dtype=dtype, kv_cache_memory=parse_memory(MEMORY))
    c = llm.engine.model_config
    e = _check(llm.engine, dtype, capsys, "--layers", str(c.num_layers), "--kv-heads", str(c.num_kv_heads),
               "--head-dim", str(c.head_dim))
    assert e["bytes_per_token"] == 2 * 2 * 2 * 16 * (4 if dtype == "float32" else 2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_smollm2_dimensions(smollm2, dtype, capsys):
    base = smollm2.engine                                          # its model and tokenizer; a new pool per dtype
    engine = LLMEngine(base.runner.model, base.model_config, base.tokenizer,
                       EngineConfig(dtype=dtype, kv_cache_memory=parse_memory(MEMORY)), base.max_model_len)
    e = _check(engine, dtype, capsys)                               # no flags: the default model's own config
    assert e["bytes_per_token"] == 2 * 30 * 3 * 64 * (4 if dtype == "float32" else 2)  # 23040 / 11520


def test_hf_config_json_saved_by_transformers(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=96, intermediate_size=192, num_hidden_layers=3,
                                      num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path)
    from haltwise.tokenizer.tiny import tiny_tokenizer

    tiny_tokenizer()._tk.save(str(tmp_path / "tokenizer.json"))
    llm = LLM(model=tmp_path, dtype="float32", kv_cache_memory=parse_memory(MEMORY))
    assert (llm.engine.model_config.num_layers, llm.engine.model_config.head_dim) == (3, 16)
    e = _check(llm.engine, "float32", capsys, "--model", str(tmp_path / "config.json"))
    assert e["bytes_per_token"] == 2 * 3 * 2 * 16 * 4


def test_sliding_info_names_the_sliding_layers():
    from types import SimpleNamespace

    from haltwise.tools.kv_estimate import sliding_info

    gemma_like = SimpleNamespace(sliding_window=512, layer_types=("sliding_attention",) * 5 + ("full_attention",))
    assert sliding_info(gemma_like) == {"sliding_layers": 5, "sliding_window": 512}
    assert sliding_info(SimpleNamespace()) == {"sliding_layers": 0, "sliding_window": None}
    assert sliding_info(SimpleNamespace(sliding_window=4096, layer_types=None)) == {"sliding_layers": 0,
                                                                                   "sliding_window": None}


def test_auto_memory_is_what_serve_would_take(capsys):
    from haltwise.cli import main
    from haltwise.engine.kv_cache import auto_kv_memory

    assert main(["kv-estimate", "--memory", "auto", "--layers", "2", "--kv-heads", "2", "--head-dim", "16",
                 "--seq-len", "256", "--batch", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0 < out["memory_budget"] <= auto_kv_memory(512, 16, 256, 4) + 1 and out["sequences_in_budget"] >= 1


def test_a_model_with_sliding_layers_is_estimated_as_the_engine_allocates_it():
    """Gemma-shaped: 2 sliding layers keep their window in a pool of their own, the full-context layer is the
    per-token cost; estimate's blocks, tokens and bytes equal the engine's caches."""
    from haltwise.models.tiny import tiny_llama
    from haltwise.tokenizer.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    net = tiny_llama(tokenizer.vocab_size, num_layers=3, sliding_window=64,
                     layer_types=("sliding_attention", "sliding_attention", "full_attention"))
    memory = parse_memory(MEMORY)
    engine = LLMEngine(net, net.config, tokenizer, EngineConfig(kv_cache_memory=memory, max_num_seqs=4), 512)
    e = estimate(3, 2, 16, "float32", 512, 4, memory, 16, sliding_layers=2, window=64)
    sizes = [k.shape[0] for k, _ in engine.runner.kv_caches]
    assert sizes == [engine.budget.window_blocks] * 2 + [e["blocks_in_budget"]] and sizes[0] < sizes[2]
    assert e["bytes_per_token"] == 2 * 1 * 2 * 16 * 4
    allocated = sum(t.numel() * t.element_size() for pair in engine.runner.kv_caches for t in pair)
    assert allocated == e["blocks_in_budget"] * 16 * e["bytes_per_token"] + e["window_pool_bytes"] <= memory
