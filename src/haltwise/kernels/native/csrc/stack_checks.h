// The decode stack's argument checks and small helpers (decode_stack.cpp), kept apart so the stack's file
// holds the layer loop: a KV pool's slots and block tables checked against its cache before any row is
// written, a cache's KVFormat, a float32 vector view, and the bias add.
#pragma once
#include <torch/extension.h>

#include <vector>

#include "quant_kernels.h"

namespace haltwise_native {

inline void check_pool(int64_t T, const torch::Tensor& cache, const torch::Tensor& slots,
                       const torch::Tensor& block_tables, const torch::Tensor& seq_lens) {
  TORCH_CHECK(slots.scalar_type() == torch::kLong && block_tables.scalar_type() == torch::kLong &&
              slots.is_contiguous() && block_tables.is_contiguous() && block_tables.dim() == 2 &&
              block_tables.size(0) == T && slots.size(0) == T,
              "haltwise native: one int64 slot and block table per row, contiguous");
  const int64_t num_blocks = cache.size(0), block_size = cache.size(1), nb = block_tables.size(1);
  const int64_t* slot = slots.data_ptr<int64_t>();
  const int64_t* lens = seq_lens.data_ptr<int64_t>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  for (int64_t t = 0; t < T; ++t) {
    TORCH_CHECK(slot[t] >= 0 && slot[t] < num_blocks * block_size, "haltwise native: row ", t, ": slot ", slot[t],
                " is outside the KV cache (", num_blocks * block_size, " slots)");
    TORCH_CHECK(lens[t] >= 1 && lens[t] <= nb * block_size, "haltwise native: row ", t, ": context length ", lens[t],
                " is outside 1..", nb * block_size, " (its block table's reach)");
    for (int64_t j = 0; j < (lens[t] + block_size - 1) / block_size; ++j) {
      const int64_t block = tables[t * nb + j];
      TORCH_CHECK(block >= 0 && block < num_blocks, "haltwise native: row ", t, ": block table entry ", j, " = ",
                  block, " is outside the KV cache (", num_blocks, " blocks)");
    }
  }
}

// The KVFormat a cache tensor's dtype stores (quant_kernels.h).
inline int format_of(const torch::Tensor& cache) {
  switch (cache.scalar_type()) {
    case torch::kFloat32: return KV_F32;
    case torch::kBFloat16: return KV_BF16;
    case torch::kChar: return KV_Q8;
    default: TORCH_CHECK(false, "haltwise native: KV caches must be float32, bfloat16 or int8");
  }
  return KV_F32;
}

inline torch::Tensor float_vector(const torch::Tensor& t, int64_t n) {
  TORCH_CHECK(t.numel() == n, "haltwise native: expected ", n, " values, got ", t.numel());
  return t.detach().to(torch::kFloat32).contiguous().view({n});
}

// y[r, :] += bias, one float add per value (the bits of torch's add_). A plain loop, not y.add_(bias):
// a 32-row add is big enough for torch to open an OpenMP region, whose threads then contended with the
// native pool's (8% of Qwen2.5's 32-row stack, mostly waiting).
inline void add_bias(const float* bias, float* y, int64_t rows, int64_t n, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ldy;
    for (int64_t i = 0; i < n; ++i) row[i] += bias[i];
  }
}

// The rope tables, context lengths and each pool's slots and block tables fit the cache of every layer
// (a layer with a window reads its own pool). Layers: the stack's layers (their `window`), D: head_dim.
template <class Layers>
inline void check_bounds(const Layers& layers, int64_t D, int64_t T, const torch::Tensor& cos, const torch::Tensor& sin,
                         const torch::Tensor& cos_local, const torch::Tensor& sin_local,
                         const std::vector<torch::Tensor>& k_caches, const torch::Tensor& slots,
                         const torch::Tensor& block_tables, const torch::Tensor& window_slots,
                         const torch::Tensor& window_tables, const torch::Tensor& seq_lens) {
  for (const torch::Tensor* r : {&cos, &sin, &cos_local, &sin_local}) {
    TORCH_CHECK(!r->defined() || (r->scalar_type() == torch::kFloat32 && r->is_contiguous() && r->numel() >= T * D),
                "haltwise native: rope tables must be contiguous float32 with ", T * D, " values");
  }
  TORCH_CHECK(seq_lens.scalar_type() == torch::kLong && seq_lens.is_contiguous() && seq_lens.size(0) == T,
              "haltwise native: one int64 context length per row");
  int64_t pool_blocks[2] = {-1, -1};                   // [full-context layers, sliding layers]: one pool each
  for (size_t li = 0; li < k_caches.size(); ++li) {
    const bool sliding = layers[li].window > 0;
    if (pool_blocks[sliding] < 0) {
      pool_blocks[sliding] = k_caches[li].size(0);
      check_pool(T, k_caches[li], sliding ? window_slots : slots, sliding ? window_tables : block_tables, seq_lens);
    }
    TORCH_CHECK(k_caches[li].dim() == 4 && k_caches[li].size(0) == pool_blocks[sliding],
                "haltwise native: layer ", li, "'s cache holds ", k_caches[li].size(0), " blocks, its pool ",
                pool_blocks[sliding]);
  }
}

}  // namespace haltwise_native
