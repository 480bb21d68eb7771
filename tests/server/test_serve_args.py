"""`haltwise serve`'s default served model name: what a client would naturally send for that --model."""
from haltwise.models.catalog import resolve_model
from haltwise.server.serve import DEFAULT_MODEL_NAME, default_served_name


def test_named_models_keep_their_name():
    assert default_served_name("qwen2.5-coder-0.5b") == "qwen2.5-coder-0.5b"
    assert default_served_name("gemma3-270m") == "gemma3-270m"


def test_the_default_model_keeps_its_historic_name_however_it_is_given():
    assert default_served_name(None) == DEFAULT_MODEL_NAME
    assert default_served_name("smollm2-135m") == DEFAULT_MODEL_NAME
    assert default_served_name(str(resolve_model(None))) == DEFAULT_MODEL_NAME
    assert default_served_name("anything", tiny=True) == DEFAULT_MODEL_NAME


def test_other_files_are_served_under_their_stem(tmp_path):
    assert default_served_name(str(tmp_path / "Llama-3.2-1B.Q4_K_M.gguf")) == "Llama-3.2-1B.Q4_K_M"
    assert default_served_name(str(tmp_path / "my-hf-dir")) == "my-hf-dir"
