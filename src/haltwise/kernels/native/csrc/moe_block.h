// MoeBlock: a layer's mixture-of-experts MLP in the native stack (qwen3moe, qwen2moe's shared expert), the
// native counterpart of models/moe.py's SparseMoE, which documents the arithmetic:
//
//     router    logits = x W_r^T (one dot32 per output), p = softmax(logits), the top-k experts of p (equal
//               p: the lower index), renormalised to sum 1 when norm_topk_prob
//     experts   the step's (token, expert) picks grouped by expert (tokens ascending within one), each expert
//               run once on its rows: g, u = x W_gate_up; m = act(g) * u; y = m W_down
//     combine   out[t] = 0 + p_e1 y_e1 + p_e2 y_e2 + ... over t's experts in ascending expert index
//     shared    out[t] += sigmoid(x w_g) * shared_expert(x)   (qwen2moe; all rows, after the routed sum)
//     gpt-oss   logits + b_r; the top-k logits (equal: the lower index), softmax over those k; experts with
//               biases and the clamped GLU: g = min(g, limit), u = clamp(u, +-limit),
//               m = (u + 1) * g * sigmoid(alpha g)   (set_clamped_glu: in place of act)
//
// Batch invariance: the router, softmax and top-k of a row read that row alone; every expert row is computed
// by the dense linears' own per-row kernels (a row's q8 quantization, one fixed-order dot product per output),
// so its bits do not depend on which rows share its expert; the combine order is fixed by expert index.
// Threads: one pass over all experts' gate_up rows, one over the activations, one over all down rows.
#pragma once
#include <torch/extension.h>

#include <string>
#include <vector>

#include "native_linear.h"
#include "stack_linear.h"

namespace haltwise_native {

class MoeBlock {
 public:
  // buckets: the kernel plan's row buckets (kernels/plan.py BUCKETS): an expert of n rows runs the format
  // its linears have for the smallest bucket >= n, as a PlannedLinear would.
  MoeBlock(int64_t hidden, int64_t experts, int64_t top_k, bool norm_topk_prob, int64_t act,
           const std::vector<int64_t>& buckets, const std::string& isa);

  // weight (E, hidden) float32; shared_gate (hidden,) or empty (no shared expert); bias (E,) or empty.
  // topk_first: the top-k of the (biased) logits, then softmax over those k (gpt-oss); else softmax first.
  void set_router(const torch::Tensor& weight, const torch::Tensor& shared_gate, const torch::Tensor& bias,
                  bool topk_first);
  // The experts' activation is gpt-oss's clamped GLU (moe_block.cpp clamped_glu) with these constants.
  void set_clamped_glu(double alpha, double limit);
  // Linear `slot` (0 gate_up, 1 down) of expert `expert`; expert == E sets the shared expert.
  void set_expert(int64_t expert, int64_t slot, const std::vector<torch::Tensor>& weights,
                  const std::vector<int64_t>& qtypes, const std::vector<int64_t>& rows, const torch::Tensor& dense,
                  const torch::Tensor& bias, const std::vector<bool>& native_bucket, int64_t out_features,
                  int64_t in_features);
  void check_complete() const;   // every expert's linears are set, with matching shapes
  int64_t hidden() const { return H_; }

  // out (T, hidden) = the block's output for x (T, hidden); `bucket`: the step's row bucket (the shared expert's).
  void forward(const float* x, int64_t T, int64_t bucket, float* out) const;
  torch::Tensor run(const torch::Tensor& x, int64_t bucket) const;   // forward on a tensor (tests)

 private:
  struct Expert {
    StackLinear gate_up, down;
    int64_t width = 0;   // intermediate size
  };
  int64_t bucket_of(int64_t rows) const;
  void route(const float* logits, int64_t* picked, float* weights) const;

  int64_t H_, E_, k_;
  bool norm_;
  int64_t act_;
  std::vector<int64_t> buckets_;
  const KernelTable& table_;
  torch::Tensor router_;           // (E [+ 1 shared gate row], hidden) float32
  torch::Tensor router_bias_;      // (E,) float32 or undefined
  bool topk_first_ = false;
  bool clamped_ = false;           // the clamped GLU in place of act_
  float alpha_ = 0.0f, limit_ = 0.0f;
  std::vector<Expert> experts_;    // E routed [+ the shared expert]
  bool shared_ = false;
};

}  // namespace haltwise_native
