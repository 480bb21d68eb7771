"""Frozen configuration dataclasses: what the model is, and how the engine may use memory."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# "auto": float32 activations and KV, every linear in the format the host-measured kernel plan picks
# (haltwise/kernels); "float32": plain float32 everywhere (the exact transformers oracle);
# "bfloat16": bf16 weights, activations and KV (refused where this host cannot run bf16 matmuls).
ENGINE_DTYPES = ("auto", "float32", "bfloat16")
# How the KV cache stores keys and values (models/kv_codec.py). "auto": int8 under dtype auto (the
# default path; its quality cost is measured and bounded in docs/benchmarks.md, "KV cache quality"), otherwise the
# activations' dtype (float32 stays the exact oracle).
KV_CACHE_DTYPES = ("auto", "float32", "bfloat16", "int8")
AUTO_KV_DTYPE = "int8"
SCHEDULING_POLICIES = ("fcfs", "priority")   # engine/priority.py
# --kv-cache-memory auto (engine/kv_cache.py): the share of available RAM the pool takes, and the most it
# takes to fit one full-length sequence.
KV_AUTO_FRACTION = 0.10
KV_AUTO_MAX_FRACTION = 0.50
# --draft-model's default: "none" (off) until it measures a win in natural chat on the target host;
# "auto" would take the catalog's pairing (models/catalog.py: qwen2.5-coder-1.5b -> qwen2.5-coder-0.5b).
DEFAULT_DRAFT_MODEL = "none"


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a Llama-family model, as read from GGUF metadata or config.json."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int           # grouped-query attention: num_heads % num_kv_heads == 0
    head_dim: int
    max_position_embeddings: int  # the trained window
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    rope_scaling: dict[str, Any] | None = None  # Hugging Face `rope_scaling` dict, or None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()        # from the model/generation config only
    # Family and per-model differences (architectures.py states what each family changes):
    architecture: str = "llama"                 # registry key: llama, qwen2, qwen3, gemma3
    qkv_bias: bool = False                      # q/k/v projections carry a bias (qwen2)
    hidden_act: str = "silu"                    # gated-MLP activation: silu or gelu_pytorch_tanh
    sliding_window: int | None = None           # tokens a sliding layer sees (itself included)
    layer_types: tuple[str, ...] | None = None  # per layer "full_attention" / "sliding_attention"; None = all full
    rope_local_theta: float | None = None       # RoPE base of sliding layers (gemma3); None = rope_theta
    query_pre_attn_scalar: float | None = None  # attention scale = this ** -0.5; None = head_dim
    final_logit_softcapping: float | None = None  # logits = cap * tanh(logits / cap)
    attn_logit_softcapping: float | None = None   # attention scores = cap * tanh(scores / cap) (gemma2)
    rope_freq_factors: tuple[float, ...] | None = None  # GGUF rope_freqs: inv_freq / factor (llama3)
    rotary_dim: int | None = None               # leading dims of each head RoPE rotates (phi3 partial); None = all
    # Mixture of experts (qwen2moe, qwen3moe; models/moe.py). num_experts 0 = every MLP is dense.
    num_experts: int = 0                        # experts per MoE layer
    num_experts_per_tok: int = 0                # experts each token is routed to (top-k)
    moe_intermediate_size: int = 0              # one expert's hidden width
    norm_topk_prob: bool = False                # renormalise the top-k router probabilities to sum to 1
    shared_expert_intermediate_size: int = 0    # qwen2moe's always-on expert behind a sigmoid gate; 0 = none
    mlp_only_layers: tuple[int, ...] = ()       # layers that keep a dense MLP in an MoE model
    # gpt-oss: the router takes top-k of its biased logits, then softmax over the k ("topk_softmax"; the
    # others: "softmax_topk"); experts carry biases and run the clamped GLU (alpha, limit) of models/moe.py
    moe_router: str = "softmax_topk"
    expert_glu: tuple[float, float] | None = None
    no_rope_layers: tuple[int, ...] = ()        # layers whose q/k are not rotated (smollm3: every 4th)

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} not divisible by num_kv_heads {self.num_kv_heads}")
        if self.layer_types is not None and len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types names {len(self.layer_types)} layers, the model has {self.num_layers}")
        if self.no_rope_layers and self.rope_local_theta is not None:
            raise ValueError("no_rope_layers and a sliding-layer rope base cannot be combined")
        if self.rotary_dim is not None and not (0 < self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0):
            raise ValueError(f"rotary_dim {self.rotary_dim} must be even and within 1..head_dim {self.head_dim}")
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"num_experts_per_tok {self.num_experts_per_tok} is outside 1..{self.num_experts}")

    def is_sliding(self, layer: int) -> bool:
        """Whether `layer` attends only to the last sliding_window positions."""
        return (self.sliding_window is not None and self.layer_types is not None
                and self.layer_types[layer] == "sliding_attention")

    def is_moe(self, layer: int) -> bool:
        """Whether `layer`'s MLP is a routed mixture of experts."""
        return self.num_experts > 0 and layer not in self.mlp_only_layers

    @property
    def num_sliding_layers(self) -> int:
        return sum(self.is_sliding(i) for i in range(self.num_layers))

    def kv_bytes_per_token(self, dtype: str, num_layers: int | None = None) -> int:
        """2 (K and V) x layers (all unless given) x kv_heads x the bytes of one stored row (head_dim values;
        int8 adds a float32 scale per row: models/kv_codec.py)."""
        row = self.head_dim + 4 if dtype == "int8" else self.head_dim * DTYPE_BYTES[dtype]
        return 2 * (self.num_layers if num_layers is None else num_layers) * self.num_kv_heads * row


@dataclass(frozen=True)
class EngineConfig:
    """How the engine schedules and how much KV memory it may hold."""

    dtype: str = "float32"              # one of ENGINE_DTYPES; the CLI defaults to "auto"
    block_size: int = 16                # tokens per KV block
    # bytes for the whole KV pool (K and V, all layers), or "auto": a share of available RAM (engine/kv_cache.py)
    kv_cache_memory: int | str = 512 * 2**20
    max_model_len: int | None = None    # None = the model's trained window (or what rope scaling allows)
    max_num_seqs: int = 64              # sequences per step
    max_num_batched_tokens: int = 2048  # token budget per step (decodes first, then prefill chunks); as vLLM
    enable_chunked_prefill: bool = True  # split long prompts across steps
    long_prefill_chunk: int = 256       # while requests wait, a running prefill takes at most this many tokens a step
    # Prefill chunks are sized so a step takes about this long on this host, from the measured cost of the
    # steps run so far (engine/step_cost.py, docs/engine-steps.md): a decode beside a long prompt gets a token
    # about this often. 0 = chunks bounded by max_num_batched_tokens only.
    step_target_s: float = 0.5
    enable_prefix_caching: bool = True  # share full prompt blocks by content hash
    max_queue: int = 256                # waiting requests beyond which admission rejects at once
    watermark: float = 0.9              # admit only while used blocks stay under this share of the pool
    num_threads: int | None = None      # torch intra-op threads; None = all cores
    native_decode: bool = True          # dtype auto: steps run all layers in one native call (models/native_decode.py)
    # dtype auto: the same request gives the same tokens whatever shares its steps (SPEC §11): one
    # batch-invariant format per linear and every step, prefill included, through the native layer stack.
    # False (opt-in, --nondeterministic-kernels): the fastest format per row bucket, native only for
    # decode-only steps; a request's tokens may then depend on its batch, chunking and cache hits.
    batch_invariant: bool = True
    kv_cache_dtype: str = "auto"        # one of KV_CACHE_DTYPES (--kv-cache-dtype)
    # A MoE model's routed experts in memory or mapped from files: "auto", "mapped" or "resident"
    # (--expert-weights; engine/expert_weights.py)
    expert_weights: str = "auto"
    # Prompt-lookup speculative decoding (engine/speculation.py): at most this many n-gram draft tokens
    # verified per decode step; 0 = off. Exact: the tokens are those decoding without it gives. Runs only
    # where the steps are batch invariant (dtype auto); 2 measured fastest on SmolLM2 here (docs/benchmarks.md).
    speculative_tokens: int = 2
    # Drafts only in steps with at most this many decoding sequences (None = any number). A draft row costs
    # about what a decode row costs once a step has a few rows (the kernels turn compute bound), so with
    # several decodes a draft that is rejected, or even accepted, loses to plain decoding; a lone decode is
    # bound by reading the weights and its draft rows come almost free. As vLLM's
    # speculative_disable_by_batch_size; 1 measured best on all three catalog models here (docs/benchmarks.md).
    speculative_max_batch: int | None = 1
    # Draft-model speculative decoding (engine/draft_model.py): a smaller model with the same vocabulary
    # proposes drafts the target verifies (exact, as prompt lookup). A catalog name or a path; "auto": the
    # draft the catalog pairs with the model, when its packages are installed; None / "none": off.
    draft_model: str | None = DEFAULT_DRAFT_MODEL
    draft_max_tokens: int = 8           # the draft model's longest draft (its length adapts below this)
    # Sliding-window layers keep every position (and the prefix cache stays on) instead of only their
    # window in a pool of their own (engine/window_blocks.py); as llama.cpp's --swa-full.
    swa_full: bool = False
    # "fcfs": starts in arrival order (fairness.py) and a request's priority must be 0 (a 400 otherwise, as
    # vLLM v0); "priority": lower `priority` first, aged (engine/priority.py) so no request starves.
    scheduling_policy: str = "fcfs"
    priority_aging_steps: int = 64      # priority policy: one level more urgent per this many engine steps

    @property
    def kv_dtype(self) -> str:
        """How the KV cache stores values: kv_cache_dtype, or for "auto" AUTO_KV_DTYPE under dtype auto
        and the activations' dtype otherwise."""
        if self.kv_cache_dtype != "auto":
            return self.kv_cache_dtype
        return AUTO_KV_DTYPE if self.dtype == "auto" else self.dtype

    def __post_init__(self) -> None:
        if self.dtype not in ENGINE_DTYPES:
            raise ValueError(f"dtype must be one of {list(ENGINE_DTYPES)}, got {self.dtype!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {list(KV_CACHE_DTYPES)}, got {self.kv_cache_dtype!r}")
        if self.expert_weights not in ("auto", "mapped", "resident"):
            raise ValueError(f"expert_weights must be auto, mapped or resident, got {self.expert_weights!r}")
        if isinstance(self.kv_cache_memory, str) and self.kv_cache_memory != "auto":
            raise ValueError(f"kv_cache_memory must be bytes or 'auto', got {self.kv_cache_memory!r}")
        if min(self.block_size, self.max_num_seqs, self.max_num_batched_tokens, self.long_prefill_chunk) < 1:
            raise ValueError("block_size, max_num_seqs, max_num_batched_tokens and long_prefill_chunk must be >= 1")
        if not self.step_target_s >= 0:
            raise ValueError(f"step_target_s must be >= 0, got {self.step_target_s}")
        if self.speculative_tokens < 0:
            raise ValueError(f"speculative_tokens must be >= 0, got {self.speculative_tokens}")
        if self.draft_max_tokens < 1:
            raise ValueError(f"draft_max_tokens must be >= 1, got {self.draft_max_tokens}")
        if self.speculative_max_batch is not None and self.speculative_max_batch < 1:
            raise ValueError(f"speculative_max_batch must be >= 1 or None, got {self.speculative_max_batch}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(f"scheduling_policy must be one of {list(SCHEDULING_POLICIES)}, "
                             f"got {self.scheduling_policy!r}")
        if self.priority_aging_steps < 1:
            raise ValueError(f"priority_aging_steps must be >= 1, got {self.priority_aging_steps}")
        if not 0.0 < self.watermark <= 1.0:
            raise ValueError(f"watermark must be in (0, 1], got {self.watermark}")
