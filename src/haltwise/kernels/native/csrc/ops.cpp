// Torch binding: y = x @ W.T for weights held as raw GGUF blocks, activations quantized to q8 per
// block of 32 inputs. Threads: parallel_chunks over output rows (thread_pool.h).
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "native_linear.h"
#include "thread_pool.h"

namespace haltwise_native {
namespace {

bool cpu_has_avx2() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpu_has_avx512vnni() {
#if defined(__x86_64__)
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

bool cpu_has_avxvnni() {
#if defined(__x86_64__)
  return cpu_has_avx2() && __builtin_cpu_supports("avxvnni");
#else
  return false;
#endif
}

RowsKernel rows_kernel(const KernelTable& t, int64_t qtype) {
  RowsKernel k = nullptr, fallback = nullptr;
  const KernelTable& s = scalar_kernels();
  switch (qtype) {
    case Q4_0: k = t.q4_0; fallback = s.q4_0; break;
    case Q4_1: k = t.q4_1; fallback = s.q4_1; break;
    case Q5_0: k = t.q5_0; fallback = s.q5_0; break;
    case Q8_0: k = t.q8_0; fallback = s.q8_0; break;
    case Q4_K: k = t.q4_k; fallback = s.q4_k; break;
    case Q6_K: k = t.q6_k; fallback = s.q6_k; break;
    case MXFP4: k = t.mxfp4; fallback = s.mxfp4; break;
    case Q4_0X8: k = t.q4_0x8; fallback = s.q4_0x8; break;
    case Q4_1X8: k = t.q4_1x8; fallback = s.q4_1x8; break;
    case Q8_0X8: k = t.q8_0x8; fallback = s.q8_0x8; break;
    case Q5_0X8: k = t.q5_0x8; fallback = s.q5_0x8; break;
    case Q4_KX8: k = t.q4_kx8; fallback = s.q4_kx8; break;
    case Q6_KX8: k = t.q6_kx8; fallback = s.q6_kx8; break;
    default: TORCH_CHECK(false, "haltwise native: GGML quantization type ", qtype, " is not supported");
  }
  return k ? k : fallback;
}


bool interleaved(int64_t qtype) { return qtype > 1000; }

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

}  // namespace

// Inputs per weight block and bytes per block.
std::pair<int64_t, int64_t> block_shape(int64_t qtype) {
  switch (qtype) {
    case Q4_0: return {32, 18};
    case Q4_1: return {32, 20};
    case Q5_0: return {32, 22};
    case Q8_0: return {32, 34};
    case Q4_K: return {256, 144};
    case Q6_K: return {256, 210};
    case MXFP4: return {32, kMxfp4Bytes};
    case Q4_0X8: return {32, 144};    // per group of 8 rows
    case Q4_1X8: return {32, 160};
    case Q8_0X8: return {32, 272};
    case Q5_0X8: return {32, 176};
    case Q4_KX8: return {256, 1184};
    case Q6_KX8: return {256, 1680};
    default: TORCH_CHECK(false, "haltwise native: GGML quantization type ", qtype, " is not supported");
  }
}

std::vector<std::string> isas();

// "auto": the path HALTWISE_NATIVE_ISA names (A/B runs: every path gives the same bits, only speed
// differs), else the widest this CPU runs. Read once; a path this CPU cannot run is an error at first use.
const std::string& auto_isa() {
  static const std::string chosen = [] {
    const char* env = std::getenv("HALTWISE_NATIVE_ISA");
    return std::string(env && *env ? env : isas().back().c_str());
  }();
  return chosen;
}

const KernelTable& table_for(const std::string& requested) {
  const std::string& isa = requested == "auto" ? auto_isa() : requested;
  if (isa == "scalar") return scalar_kernels();
#if defined(__x86_64__)
  if (isa == "avx512vnni") {
    TORCH_CHECK(cpu_has_avx512vnni(), "haltwise native: this CPU lacks avx2/fma/f16c/avx512f/avx512vl/avx512vnni");
    return avx512vnni_kernels();
  }
  if (isa == "avxvnni") {
    TORCH_CHECK(cpu_has_avxvnni(), "haltwise native: this CPU lacks avx2/fma/f16c/avxvnni");
    return avxvnni_kernels();
  }
  if (isa == "avx2") {
    TORCH_CHECK(cpu_has_avx2(), "haltwise native: this CPU lacks avx2/fma/f16c");
    return avx2_kernels();
  }
#endif
  TORCH_CHECK(false, "haltwise native: unknown ISA path ", isa, " (this CPU runs: ", isas().back(), " and narrower)");
  return scalar_kernels();
}

NativeLinear make_linear(const std::vector<torch::Tensor>& weights, const std::vector<int64_t>& qtypes,
                         const std::vector<int64_t>& rows, int64_t K, const KernelTable& table) {
  TORCH_CHECK(weights.size() == qtypes.size() && weights.size() == rows.size() && !weights.empty(),
              "haltwise native: one qtype and row count per shard");
  TORCH_CHECK(K % QK == 0, "haltwise native: in_features must be a multiple of 32");
  NativeLinear linear;
  linear.K = K;
  for (size_t i = 0; i < weights.size(); ++i) {
    const torch::Tensor& w = weights[i];
    TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kUInt8 && w.is_contiguous(),
                "haltwise native: weights must be contiguous (rows, bytes) uint8");
    const auto [per_block, block_bytes] = block_shape(qtypes[i]);
    TORCH_CHECK(K % per_block == 0 && w.size(1) == K / per_block * block_bytes,
                "haltwise native: shard ", i, " has ", w.size(1), " bytes per row, expected ",
                K / per_block * block_bytes, " for K=", K);
    const int64_t stored = interleaved(qtypes[i]) ? w.size(0) * 8 : w.size(0);
    TORCH_CHECK(rows[i] <= stored && rows[i] > stored - (interleaved(qtypes[i]) ? 8 : 1),
                "haltwise native: shard ", i, " stores ", stored, " rows, not ", rows[i]);
    linear.shards.push_back({w.data_ptr<uint8_t>(), w.size(1), linear.N, linear.N + rows[i],
                             rows_kernel(table, qtypes[i]), interleaved(qtypes[i])});
    linear.keep.push_back(w);
    linear.N += rows[i];
  }
  return linear;
}

void Q8Rows::resize(int64_t rows, int64_t inputs) {
  M = rows;
  K = inputs;
  q.resize(M * K);
  d.resize(M * (K / QK));
  s.resize(M * (K / QK));
  qsum128.resize(M * (K / QK));
  qsum16x32.resize(2 * M * (K / QK));
}

void Q8Rows::quantize(const KernelTable& table, const float* x, int64_t m0, int64_t m1) {
  table.quantize(x, K, q.data(), d.data(), s.data(), m0, m1);
  sums(m0, m1);
}

void Q8Rows::quantize_row(const KernelTable& table, const float* row, int64_t m) {
  const int64_t nb = K / QK;
  table.quantize(row, K, q.data() + m * K, d.data() + m * nb, s.data() + m * nb, 0, 1);
  sums(m, m + 1);
}

void Q8Rows::sums(int64_t m0, int64_t m1) {
  const int64_t nb = K / QK;
  for (int64_t i = 2 * m0 * nb; i < 2 * m1 * nb; ++i) {     // halves of 16 inputs
    int32_t t = 0;
    for (int64_t k = 0; k < QK / 2; ++k) t += q[i * (QK / 2) + k];
    qsum16x32[i] = 32 * t;
  }
  for (int64_t i = m0 * nb; i < m1 * nb; ++i) qsum128[i] = 4 * (qsum16x32[2 * i] + qsum16x32[2 * i + 1]);
}

ActQ8 Q8Rows::rows(int64_t m0, int64_t n) const {
  const int64_t nb = K / QK;
  return ActQ8{q.data() + m0 * K, d.data() + m0 * nb, s.data() + m0 * nb, n, K, qsum128.data() + m0 * nb,
               qsum16x32.data() + 2 * m0 * nb};
}

// Interleaved shards cut their part of [b, e) at multiples of 16 (shard-relative: two groups of 8 rows,
// which the pair orders, kx8_pairs_*.inc and x8_pairs_zmm.inc, take together), rounding both ends the same
// way, so neighbouring tasks still partition the rows.
void linear_rows(const NativeLinear& linear, const ActQ8& act, float* y, int64_t b, int64_t e) {
  for (const Shard& s : linear.shards) {
    int64_t lo = std::max(b, s.n0) - s.n0, hi = std::min(e, s.n1) - s.n0;
    if (lo >= hi) continue;
    if (s.x8) {
      lo = round16(lo);
      hi = std::min(round16(hi), s.n1 - s.n0);
      if (lo >= hi) continue;
    }
    s.kernel(s.w, s.row_bytes, act, y + s.n0, linear.N, lo, hi);
  }
}

void run_linear(const NativeLinear& linear, const KernelTable& table, const float* x, int64_t M, float* y) {
  const int64_t K = linear.K, N = linear.N;
  if (M == 0 || N == 0) return;
  Q8Rows acts;
  acts.resize(M, K);
  parallel_chunks(0, M, 16, [&](int64_t m0, int64_t m1) { acts.quantize(table, x, m0, m1); });
  const ActQ8 act = acts.rows(0, M);
  // Chunks of at least kMinChunkWork multiply-adds and 16 rows.
  parallel_chunks(0, N, std::max<int64_t>(16, kMinChunkWork / (K * M)),
                  [&](int64_t b, int64_t e) { linear_rows(linear, act, y, b, e); });
}

void run_dense(const float* w, int64_t N, int64_t K, const KernelTable& table, const float* x, int64_t M, float* y) {
  if (M == 0 || N == 0) return;
  parallel_chunks(0, N, std::max<int64_t>(16, kMinChunkWork / (K * M)),
                  [&](int64_t b, int64_t e) { table.math.dense_rows(w, x, M, K, y, N, b, e); });
}

// x (M, K) float32, w (N, K) float32 -> (M, N) = x @ w.T, batch invariant (run_dense).
torch::Tensor dense(const torch::Tensor& x, const torch::Tensor& w, const std::string& isa) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "haltwise native: x must be (M, K) float32");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == torch::kFloat32 && w.is_contiguous() && w.size(1) == x.size(1),
              "haltwise native: w must be contiguous (N, K) float32 with K = x's");
  const torch::Tensor xc = x.contiguous();
  torch::Tensor y = torch::empty({xc.size(0), w.size(0)}, x.options());
  run_dense(w.data_ptr<float>(), w.size(0), w.size(1), table_for(isa), xc.data_ptr<float>(), xc.size(0),
            y.data_ptr<float>());
  return y;
}

// Row-stacked shards (e.g. q, k, v) of one fused weight: weights[i] is (N_i, row_bytes_i) uint8 of
// qtypes[i] holding rows[i] output rows (a row-interleaved shard is (ceil(N_i / 8), group bytes));
// x (M, K) float32 -> (M, sum N_i) float32. Output columns follow shard order.
torch::Tensor gemm(const std::vector<torch::Tensor>& weights, const std::vector<int64_t>& qtypes,
                   const std::vector<int64_t>& rows, const torch::Tensor& x, const std::string& isa) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == torch::kFloat32, "haltwise native: x must be (M, K) float32");
  const torch::Tensor xc = x.contiguous();
  const KernelTable& table = table_for(isa);
  const NativeLinear linear = make_linear(weights, qtypes, rows, xc.size(1), table);
  torch::Tensor y = torch::empty({xc.size(0), linear.N}, x.options());
  run_linear(linear, table, xc.data_ptr<float>(), xc.size(0), y.data_ptr<float>());
  return y;
}

// The first index of each row's largest value (MathKernels::argmax), rows shared over the native pool.
// logits (B, V) float32 without NaN -> (B,) int64; torch.max(dim=-1).indices, faster (one pass, 32 lanes).
torch::Tensor argmax_rows(const torch::Tensor& logits, const std::string& isa) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == torch::kFloat32 && logits.size(1) >= 1 &&
              logits.size(1) < (int64_t{1} << 31), "haltwise native: argmax_rows takes (B, V) float32, 1 <= V < 2^31");
  const torch::Tensor x = logits.contiguous();
  torch::Tensor out = torch::empty({x.size(0)}, x.options().dtype(torch::kLong));
  const auto argmax = table_for(isa).math.argmax;
  const float* xp = x.data_ptr<float>();
  int64_t* op = out.data_ptr<int64_t>();
  const int64_t V = x.size(1);
  parallel_chunks(0, x.size(0), 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) op[r] = argmax(xp + r * V, V);
  });
  return out;
}

std::vector<std::string> isas() {
  std::vector<std::string> out{"scalar"};
  if (cpu_has_avx2()) out.push_back("avx2");
  if (cpu_has_avxvnni()) out.push_back("avxvnni");
  if (cpu_has_avx512vnni()) out.push_back("avx512vnni");   // widest last: EVEX has 32 vector registers
  return out;
}

std::string best_isa() { return isas().back(); }

}  // namespace haltwise_native

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "haltwise native GGUF-block linear kernels";
  m.def("gemm", &haltwise_native::gemm, "y = x @ W.T on raw GGUF blocks (q8 activations)",
        pybind11::arg("weights"), pybind11::arg("qtypes"), pybind11::arg("rows"), pybind11::arg("x"), pybind11::arg("isa") = "auto");
  m.def("dense", &haltwise_native::dense, "y = x @ W.T in float32, one fixed-order dot per output (batch invariant)",
        pybind11::arg("x"), pybind11::arg("w"), pybind11::arg("isa") = "auto");
  m.def("argmax_rows", &haltwise_native::argmax_rows, "first index of each row's largest value (torch.max's)",
        pybind11::arg("logits"), pybind11::arg("isa") = "auto");
  m.def("best_isa", &haltwise_native::best_isa, "the widest ISA path this CPU can run");
  m.def("auto_isa", &haltwise_native::auto_isa, "the path isa='auto' runs (HALTWISE_NATIVE_ISA, else the widest)");
  m.def("isas", &haltwise_native::isas, "every ISA path this CPU can run");
  m.def("set_threads", &haltwise_native::set_pool_threads, "native pool threads (0: torch.get_num_threads())");
  m.def("threads", &haltwise_native::pool_threads, "threads the native pool uses");
  m.def("_pool_hold", &haltwise_native::pool_debug_hold, "test hook: park worker 1 before it claims work");
  m.def("_pool_held", &haltwise_native::pool_debug_held, "test hook: worker 1 is parked now");
  m.def("_pool_late_events", &haltwise_native::pool_debug_late_events, "calls that waited for a late worker");
  m.def("_pool_solo_ms", &haltwise_native::pool_debug_solo_ms, "test hook: the last caller-alone spell, ms");
  m.def("_pool_chunks_run", &haltwise_native::pool_debug_chunks_run, "test hook: chunks run by a thread index");
  m.def("_pool_use_torch", &haltwise_native::pool_debug_use_torch, "test hook: at::parallel_for instead of the pool");
  haltwise_native::register_decode_stack(m);
  haltwise_native::register_moe_block(m);
  haltwise_native::register_repack(m);
  haltwise_native::register_test_hooks(m);
  haltwise_native::register_spm_bpe(m);
}
