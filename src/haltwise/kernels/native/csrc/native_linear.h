// Shared by the torch-facing files (ops.cpp, decode_stack.cpp): a fused weight's raw GGUF shards, ready
// for the ISA's row kernels, and the one routine that multiplies activations by it.
#pragma once
#include <torch/extension.h>

#include <string>
#include <vector>

#include "quant_kernels.h"

namespace haltwise_native {

// The ISA's kernel table: "auto" (the widest this CPU runs), "avx2" or "scalar".
const KernelTable& table_for(const std::string& isa);

struct Shard {
  const uint8_t* w;
  int64_t row_bytes, n0, n1;    // output rows [n0, n1) of the fused weight
  RowsKernel kernel;
  bool x8;                      // row-interleaved records (repack.py)
};

struct NativeLinear {
  std::vector<Shard> shards;
  std::vector<torch::Tensor> keep;   // owns the bytes the shards point into
  int64_t N = 0, K = 0;
};

// (inputs per weight block, bytes per block) of a GGML type, or per group of 8 rows of an X8 code.
std::pair<int64_t, int64_t> block_shape(int64_t qtype);

// Validates the shards against K (inputs) and picks each shard's kernel.
NativeLinear make_linear(const std::vector<torch::Tensor>& weights, const std::vector<int64_t>& qtypes,
                         const std::vector<int64_t>& rows, int64_t K, const KernelTable& table);

// Activation rows quantized to q8 per 32 inputs (the row kernels' input), with the buffers they live in.
struct Q8Rows {
  std::vector<int8_t> q;
  std::vector<float> d, s;
  std::vector<int32_t> qsum128, qsum16x32;
  int64_t M = 0, K = 0;
  void resize(int64_t rows, int64_t inputs);    // K % 32 == 0
  // Rows [m0, m1) of x (M, K), each from its own values only (so any split over threads gives the same bits).
  void quantize(const KernelTable& table, const float* x, int64_t m0, int64_t m1);
  void quantize_row(const KernelTable& table, const float* row, int64_t m);   // K values -> row m
  ActQ8 rows(int64_t m0, int64_t n) const;     // rows [m0, m0 + n) as the kernels' input

 private:
  void sums(int64_t m0, int64_t m1);           // the exact block sums of rows [m0, m1)
};

// y[m * N + n] = W[n] . act[m] for output rows n in [b, e) of the linear, every row m of act.
void linear_rows(const NativeLinear& linear, const ActQ8& act, float* y, int64_t b, int64_t e);

// y (M, N) = x (M, K) @ W.T with x quantized to q8 per 32 inputs; threads over output rows.
void run_linear(const NativeLinear& linear, const KernelTable& table, const float* x, int64_t M, float* y);

// y (M, N) = x (M, K) @ W.T for a dense float32 W (N, K); threads over output rows, one fixed-order dot
// product per output element (batch invariant: MathKernels::dense_rows).
void run_dense(const float* w, int64_t N, int64_t K, const KernelTable& table, const float* x, int64_t M, float* y);

void register_decode_stack(pybind11::module_& m);
void register_moe_block(pybind11::module_& m);   // moe_block.cpp
void register_repack(pybind11::module_& m);
void register_test_hooks(pybind11::module_& m);   // test_hooks.cpp
void register_spm_bpe(pybind11::module_& m);   // spm_bpe.cpp: a tokenizer encoder, not a kernel

}  // namespace haltwise_native
