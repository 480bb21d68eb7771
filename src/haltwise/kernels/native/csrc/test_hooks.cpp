// Test hooks: the decode stack's math (MathKernels' gated activation and paged attention) on one ISA path
// at a time, so tests hold every path to the portable one's bits. Not used by serving.
#include <torch/extension.h>

#include <algorithm>
#include <string>
#include <vector>

#include "native_linear.h"

namespace haltwise_native {
namespace {

// Test hook: the decode stack's gated activation (MathKernels::gated_rows) on one ISA path; act 0 SiLU,
// 1 GELU (tanh). gu (rows, 2I) float32, gate then up -> (rows, I).
torch::Tensor gated_rows(const torch::Tensor& gu, int64_t act, const std::string& isa) {
  TORCH_CHECK(gu.dim() == 2 && gu.scalar_type() == torch::kFloat32 && gu.size(1) % 2 == 0 && (act == 0 || act == 1),
              "haltwise native: gu must be (rows, 2I) float32 and act 0 or 1");
  const torch::Tensor g = gu.contiguous();
  torch::Tensor y = torch::empty({g.size(0), g.size(1) / 2}, g.options());
  table_for(isa).math.gated_rows(g.data_ptr<float>(), g.size(0), g.size(1) / 2, (int)act, y.data_ptr<float>());
  return y;
}

// The KVFormat of a test hook's caches, after checking q (G, D) fits them and [start, len) fits the table.
int checked_attend_format(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                          const torch::Tensor& blocks, int64_t kvh, int64_t start, int64_t len) {
  const int format = k_cache.scalar_type() == torch::kFloat32 ? KV_F32
                     : k_cache.scalar_type() == torch::kBFloat16 ? KV_BF16 : KV_Q8;
  const int64_t D = q.size(1), block_size = k_cache.size(1), KVH = k_cache.size(2);
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == torch::kFloat32 && D % 8 == 0 && k_cache.dim() == 4 &&
              k_cache.sizes() == v_cache.sizes() && k_cache.scalar_type() == v_cache.scalar_type() &&
              (format != KV_Q8 || k_cache.scalar_type() == torch::kChar) &&
              k_cache.size(3) == (format == KV_Q8 ? D + 4 : D) && blocks.scalar_type() == torch::kLong &&
              0 <= kvh && kvh < KVH && 0 <= start && start < len && len <= blocks.numel() * block_size,
              "haltwise native: attend arguments do not fit together");
  TORCH_CHECK(blocks.max().item<int64_t>() < k_cache.size(0) && blocks.min().item<int64_t>() >= 0,
              "haltwise native: block out of range");
  return format;
}

// The G sink logits of a hook's optional `sinks` ((G,) float32: kv head kvh's query heads'), or null.
const float* sink_logits(const c10::optional<torch::Tensor>& sinks, int64_t G) {
  if (!sinks.has_value()) return nullptr;
  TORCH_CHECK(sinks->scalar_type() == torch::kFloat32 && sinks->is_contiguous() && sinks->numel() == G,
              "haltwise native: sinks must be (G,) contiguous float32");
  return sinks->data_ptr<float>();
}

// Test hook: the decode stack's paged attention of one row (MathKernels::attend_rows) on one ISA path. q
// (G, D) float32, the query heads of kv head `kvh` (sinks: their (G,) sink logits, or None); caches (blocks, block_size, KVH, D) float32 / bfloat16
// or (.., D + 4) int8; blocks: the sequence's block table. Positions [start, len) -> (G, D).
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                     const torch::Tensor& blocks, int64_t kvh, int64_t start, int64_t len, double scale,
                     const std::string& isa, const c10::optional<torch::Tensor>& sinks) {
  const int format = checked_attend_format(q, k_cache, v_cache, blocks, kvh, start, len);
  const int64_t D = q.size(1), G = q.size(0), block_size = k_cache.size(1), KVH = k_cache.size(2);
  const torch::Tensor qc = q.contiguous(), kc = k_cache.contiguous(), vc = v_cache.contiguous();
  const torch::Tensor bc = blocks.contiguous();
  torch::Tensor out = torch::empty({G, D}, q.options());
  std::vector<float> scratch(attend_scratch_floats(G, len - start, D));
  table_for(isa).math.attend_rows(qc.data_ptr<float>(), G * D, 1, G, kc.data_ptr(), vc.data_ptr(), format,
                                  bc.data_ptr<int64_t>(), block_size, KVH, kvh, D, &start, &len, (float)scale,
                                  sink_logits(sinks, G), out.data_ptr<float>(), G * D, scratch.data());
  return out;
}

// Test hook: MathKernels::attend_rows on one ISA path. q (rows, G, D) float32, the query heads of kv head
// `kvh` of `rows` rows of one sequence (block table `blocks`); row i attends to [starts[i], lens[i]).
// -> (rows, G, D).
torch::Tensor attend_rows(const torch::Tensor& q, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                          const torch::Tensor& blocks, int64_t kvh, const torch::Tensor& starts,
                          const torch::Tensor& lens, double scale, const std::string& isa,
                          const c10::optional<torch::Tensor>& sinks) {
  TORCH_CHECK(q.dim() == 3 && starts.scalar_type() == torch::kLong && lens.scalar_type() == torch::kLong &&
              starts.numel() == q.size(0) && lens.numel() == q.size(0) && q.size(0) >= 1,
              "haltwise native: attend_rows takes q (rows, G, D) and one int64 start and length per row");
  const torch::Tensor s = starts.contiguous(), l = lens.contiguous();
  const int64_t rows = q.size(0), G = q.size(1), D = q.size(2);
  int64_t lo = s[0].item<int64_t>(), hi = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t start = s[i].item<int64_t>(), len = l[i].item<int64_t>();
    checked_attend_format(q[i], k_cache, v_cache, blocks, kvh, start, len);
    lo = std::min(lo, start), hi = std::max(hi, len);
  }
  const torch::Tensor qc = q.contiguous(), kc = k_cache.contiguous(), vc = v_cache.contiguous();
  const torch::Tensor bc = blocks.contiguous();
  const int format = checked_attend_format(q[0], k_cache, v_cache, blocks, kvh, lo, hi);
  torch::Tensor out = torch::empty({rows, G, D}, q.options());
  std::vector<float> scratch(attend_scratch_floats(rows * G, hi - lo, D));
  table_for(isa).math.attend_rows(qc.data_ptr<float>(), G * D, rows, G, kc.data_ptr(), vc.data_ptr(), format,
                                  bc.data_ptr<int64_t>(), kc.size(1), kc.size(2), kvh, D, s.data_ptr<int64_t>(),
                                  l.data_ptr<int64_t>(), (float)scale, sink_logits(sinks, G), out.data_ptr<float>(),
                                  G * D, scratch.data());
  return out;
}

}  // namespace

void register_test_hooks(pybind11::module_& m) {
  m.def("_gated_rows", &haltwise_native::gated_rows, "test hook: the decode stack's gated activation on one ISA path",
        pybind11::arg("gu"), pybind11::arg("act"), pybind11::arg("isa") = "auto");
  m.def("_attend", &haltwise_native::attend, "test hook: the decode stack's paged attention on one ISA path",
        pybind11::arg("q"), pybind11::arg("k_cache"), pybind11::arg("v_cache"), pybind11::arg("blocks"),
        pybind11::arg("kvh"), pybind11::arg("start"), pybind11::arg("len"), pybind11::arg("scale"),
        pybind11::arg("isa") = "auto", pybind11::arg("sinks") = pybind11::none());
  m.def("_attend_rows", &haltwise_native::attend_rows, "test hook: MathKernels::attend_rows on one ISA path",
        pybind11::arg("q"), pybind11::arg("k_cache"), pybind11::arg("v_cache"), pybind11::arg("blocks"),
        pybind11::arg("kvh"), pybind11::arg("starts"), pybind11::arg("lens"), pybind11::arg("scale"), pybind11::arg("isa"),
        pybind11::arg("sinks") = pybind11::none());
}

}  // namespace haltwise_native
