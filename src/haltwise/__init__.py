"""haltwise: an LLM inference server that always ends a generation for a reason it can name."""
from haltwise.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams"]


def __getattr__(name: str):
    if name == "LLM":  # lazy: importing haltwise must not load torch for the CLI's --help
        from haltwise.llm import LLM

        return LLM
    raise AttributeError(name)
