// One linear of the native layer stack (decode_stack.cpp) or of an MoE block's experts (moe_block.cpp):
// its raw GGUF shards and/or float32 weight, and which format runs each row bucket (the kernel plan's choice,
// models/native_decode.py passes it). Both formats are batch invariant: one fixed-order dot product per
// output element, so a row's outputs never depend on the rows beside it.
#pragma once
#include <torch/extension.h>

#include <vector>

#include "native_linear.h"
#include "stack_checks.h"

namespace haltwise_native {

struct StackLinear {
  NativeLinear native;            // shards, when any bucket runs natively
  torch::Tensor dense;            // (N, K) float32, when any bucket runs in float32
  torch::Tensor bias;             // (N,) or undefined
  std::vector<bool> native_bucket;
  int64_t N = 0, K = 0;

  bool has(int64_t bucket) const {
    return bucket >= 0 && bucket < (int64_t)native_bucket.size() &&
           (native_bucket[bucket] ? !native.shards.empty() : dense.defined());
  }
};

inline StackLinear make_stack_linear(const std::vector<torch::Tensor>& weights, const std::vector<int64_t>& qtypes,
                                     const std::vector<int64_t>& rows, const torch::Tensor& dense,
                                     const torch::Tensor& bias, const std::vector<bool>& native_bucket,
                                     int64_t out_features, int64_t in_features, const KernelTable& table) {
  StackLinear l;
  l.N = out_features;
  l.K = in_features;
  l.native_bucket = native_bucket;
  if (!weights.empty()) {
    l.native = make_linear(weights, qtypes, rows, in_features, table);
    TORCH_CHECK(l.native.N == out_features, "haltwise native: shards hold ", l.native.N, " rows, not ", out_features);
  }
  if (dense.defined() && dense.numel()) {
    TORCH_CHECK(dense.scalar_type() == torch::kFloat32 && dense.dim() == 2 && dense.size(0) == out_features &&
                dense.size(1) == in_features, "haltwise native: dense weight must be (out, in) float32");
    l.dense = dense.contiguous();
  }
  if (bias.defined() && bias.numel()) l.bias = float_vector(bias, out_features);
  return l;
}

// y (M, N) = x (M, K) @ W.T (+ bias) in the format bucket `bucket` runs.
inline void run_stack_linear(const StackLinear& l, int64_t bucket, const KernelTable& table, const float* x,
                             int64_t M, float* y) {
  TORCH_CHECK(l.has(bucket), "haltwise native: row bucket ", bucket, " has no weight in its format");
  if (l.native_bucket[bucket]) {
    run_linear(l.native, table, x, M, y);
  } else {
    run_dense(l.dense.data_ptr<float>(), l.N, l.K, table, x, M, y);
  }
  if (l.bias.defined()) add_bias(l.bias.data_ptr<float>(), y, M, l.N, l.N);
}

}  // namespace haltwise_native
