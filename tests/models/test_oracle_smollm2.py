"""The real SmolLM2 GGUF: greedy tokens equal transformers' (same GGUF, float32), token for token."""
import pytest
import torch
import transformers

from haltwise.models.loader import default_model_path, load_model
from tests.models.paged_runner import PagedRunner, greedy

NEW_TOKENS = 64
PLAIN = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
]
CHATS = [
    [{"role": "user", "content": "What is 17 times 23? Explain step by step."}],
    [{"role": "system", "content": "You are a terse assistant."},
     {"role": "user", "content": "Name three primary colours."}],
    [{"role": "user", "content": "Écris une phrase en français sur la pluie."},
     {"role": "assistant", "content": "Il pleut."}, {"role": "user", "content": "Another, please!"}],
]


@pytest.fixture(scope="module")
def path():
    return default_model_path()


def transformers_gguf_model(path):
    """transformers' own GGUF path (its config parser, dequantizer and q/k unpermute), float32.

    AutoModelForCausalLM.from_pretrained(gguf_file=...) does the same but insists on `accelerate`,
    which is not installed; this is its loading step without the device-placement machinery.
    """
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = transformers.AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert set(missing) <= {"lm_head.weight"} and not unexpected, (missing, unexpected)
    model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model.eval()


@pytest.fixture(scope="module")
def hf(path):
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return tok, transformers_gguf_model(path)


@pytest.fixture(scope="module")
def ours(path):
    return load_model(path, max_model_len=1024)


def prompts(tok):
    chat = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in CHATS]
    return [tok(text, add_special_tokens=False)["input_ids"] for text in PLAIN + chat]


def test_config_matches_spec(ours):
    c = ours.config
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == (30, 576, 9, 3, 64)
    assert (c.vocab_size, c.max_position_embeddings, c.rope_theta) == (49152, 8192, 100000.0)
    assert c.tie_word_embeddings and c.eos_token_ids == (2,) and ours.format == "gguf"


@pytest.mark.slow
def test_greedy_equals_transformers(hf, ours):
    tok, model = hf
    # generate() stops after an eos (id 2); our loop has no stop logic, so compare its first len(want).
    for ids in prompts(tok):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=0,
                                 output_logits=True, return_dict_in_generate=True)
        want, want_logits = out.sequences[0, len(ids):].tolist(), out.logits[0][0]
        assert len(want) == NEW_TOKENS or want[-1] in ours.config.eos_token_ids
        got, got_logits = greedy(ours.model, ids, NEW_TOKENS)
        assert (got_logits - want_logits).abs().max() < 1e-3, tok.decode(ids)
        assert got[:len(want)] == want, (tok.decode(ids), tok.decode(got), tok.decode(want))


def test_batched_prefill_of_real_model(ours, hf):
    tok, _ = hf
    a, b = prompts(tok)[0], prompts(tok)[3]
    together = PagedRunner(ours.model, 2, 128).step([0, 1], [a, b], [0, 0])
    for row, ids in enumerate([a, b]):
        alone = PagedRunner(ours.model, 1, 128).step([0], [ids], [0])[0]
        assert (together[row] - alone).abs().max() < 1e-3
