"""Request fields every surface's protocol shares (pydantic, HTTP edge only): strictness, bounds, and the
loop detector's settings. Imports no surface."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from haltwise.sampling_params import RepetitionDetection

STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
MAX_N = 128                     # sanity bound on choices per request; admission judges memory
MAX_SEED = 2**63 - 1
KeepAlive = str | float | int | None   # "5m", "30s", seconds, 0 (unload once idle), -1 (forever): registry/durations.py


class Strict(BaseModel):
    """Unknown fields rejected (400 naming the field), strict types, no NaN/Infinity."""

    model_config = STRICT


def loop_detection(spec: "RepetitionDetectionSpec | None") -> RepetitionDetection:
    """The engine's loop-detector settings for a request's `repetition_detection` (None: the defaults)."""
    return RepetitionDetection(**spec.model_dump()) if spec is not None else RepetitionDetection()


class RepetitionDetectionSpec(Strict):
    """Loop-detector settings; omitted fields take haltwise's documented defaults."""

    enabled: bool = True
    max_period: int = Field(64, ge=1, le=4096)
    min_repeats: int = Field(4, ge=2, le=4096)
    min_tokens: int = Field(16, ge=1)
    near_loops: bool = True
    near_loop_ngram: int = Field(4, ge=1, le=32)
    near_loop_window: int = Field(64, ge=2, le=4096)
    near_loop_max_novelty: float = Field(0.35, ge=0.0, lt=1.0)
    tool_loops: bool = True
