"""The one error the model path raises for anything wrong with a model on disk."""
from __future__ import annotations


class ModelLoadError(ValueError):
    """A model file or directory is missing, malformed, or uses something haltwise does not support.

    The message always names the path and what is wrong, so callers can show it as is.
    """
