// MoeBlock (moe_block.h): routing, grouping by expert, the experts' linears over all experts at once, and the
// fixed-order combine. Layout of one forward over T rows with k picks each (P = T k routed rows, then T
// shared rows when the block has a shared expert):
//
//     pick (t, j): t's j-th expert in ascending index; row[t k + j] = its place in the grouped rows, where
//                  expert e's rows are [first_e, first_e + n_e) in ascending token order
//     gu (P rows of 2 I_g), mid (P rows of I_g), y (P rows of hidden): group g's rows contiguous
#include "moe_block.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "thread_pool.h"

namespace haltwise_native {
namespace {

struct Group {          // one expert's rows in this step
  const StackLinear* up;
  const StackLinear* down;
  int64_t expert, first, rows, width, bucket;
  int64_t gu_at, mid_at;   // float offsets of its rows in gu and mid
};

struct Task {           // output rows [b, e) of one group's linear
  int64_t group, b, e;
};

// Each group's output rows in chunks of at least kMinChunkWork multiply-adds (multiples of 16 rows).
template <class Linear>
std::vector<Task> tasks_for(const std::vector<Group>& groups, const Linear& linear_of) {
  std::vector<Task> tasks;
  for (int64_t g = 0; g < (int64_t)groups.size(); ++g) {
    const StackLinear& l = linear_of(groups[g]);
    const int64_t chunk = (std::max<int64_t>(16, kMinChunkWork / (l.K * groups[g].rows)) + 15) / 16 * 16;
    for (int64_t b = 0; b < l.N; b += chunk) tasks.push_back({g, b, std::min(b + chunk, l.N)});
  }
  return tasks;
}

// y (rows, N) for task's rows of linear l: native on q8 rows `act`, or float32 on x (rows, K).
void run_task(const StackLinear& l, int64_t bucket, const KernelTable& table, const ActQ8& act, const float* x,
              int64_t rows, float* y, int64_t b, int64_t e) {
  if (l.native_bucket[bucket]) {
    linear_rows(l.native, act, y, b, e);
  } else {
    table.math.dense_rows(l.dense.data_ptr<float>(), x, rows, l.K, y, l.N, b, e);
  }
}

// gpt-oss's expert activation of one row, models/moe.py ClampedGluExpert's operations in its order:
// y[i] = (clamp(u, -limit, limit) + 1) * (g' * sigmoid(g' alpha)), g' = min(g, limit); gate g = gu[0, I),
// up u = gu[I, 2I). Compiled once (this file has no ISA variants), so every ISA path gets these bits.
void clamped_glu(const float* gu, int64_t I, float alpha, float limit, float* y) {
  for (int64_t i = 0; i < I; ++i) {
    const float g = std::min(gu[i], limit), u = std::min(std::max(gu[I + i], -limit), limit);
    y[i] = (u + 1.0f) * (g * (1.0f / (1.0f + std::exp(-(g * alpha)))));
  }
}

std::unique_ptr<float[]> floats(int64_t n) { return std::unique_ptr<float[]>(new float[std::max<int64_t>(n, 1)]); }

}  // namespace

MoeBlock::MoeBlock(int64_t hidden, int64_t experts, int64_t top_k, bool norm_topk_prob, int64_t act,
                   const std::vector<int64_t>& buckets, const std::string& isa)
    : H_(hidden), E_(experts), k_(top_k), norm_(norm_topk_prob), act_(act), buckets_(buckets),
      table_(table_for(isa)), experts_(experts) {
  TORCH_CHECK(experts > 0 && top_k > 0 && top_k <= experts && !buckets.empty() && hidden % 8 == 0,
              "haltwise native: an MoE block needs 0 < top_k <= experts, row buckets, hidden % 8 == 0");
}

void MoeBlock::set_router(const torch::Tensor& weight, const torch::Tensor& shared_gate, const torch::Tensor& bias,
                          bool topk_first) {
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) == E_ && weight.size(1) == H_,
              "haltwise native: the router weight must be (experts, hidden)");
  router_bias_ = bias.defined() && bias.numel() ? float_vector(bias, E_) : torch::Tensor();
  topk_first_ = topk_first;
  shared_ = shared_gate.defined() && shared_gate.numel() > 0;
  // The shared expert's gate is one more output row of the same row-local product.
  router_ = shared_ ? torch::cat({weight.detach().to(torch::kFloat32), float_vector(shared_gate, H_).view({1, H_})})
                    : weight.detach().to(torch::kFloat32);
  router_ = router_.contiguous();
  experts_.resize(E_ + (shared_ ? 1 : 0));
}

void MoeBlock::set_clamped_glu(double alpha, double limit) {
  clamped_ = true;
  alpha_ = (float)alpha;
  limit_ = (float)limit;
}

void MoeBlock::set_expert(int64_t expert, int64_t slot, const std::vector<torch::Tensor>& weights,
                          const std::vector<int64_t>& qtypes, const std::vector<int64_t>& rows,
                          const torch::Tensor& dense, const torch::Tensor& bias,
                          const std::vector<bool>& native_bucket, int64_t out_features, int64_t in_features) {
  TORCH_CHECK(expert >= 0 && expert < (int64_t)experts_.size() && (slot == 0 || slot == 1),
              "haltwise native: no expert ", expert, " / slot ", slot, " (set_router first for a shared expert)");
  TORCH_CHECK(native_bucket.size() == buckets_.size(), "haltwise native: one format flag per row bucket");
  Expert& x = experts_[expert];
  (slot == 0 ? x.gate_up : x.down) = make_stack_linear(weights, qtypes, rows, dense, bias, native_bucket,
                                                       out_features, in_features, table_);
  if (slot == 0) x.width = out_features / 2;
}

void MoeBlock::check_complete() const {
  TORCH_CHECK(router_.defined(), "haltwise native: the MoE block has no router");
  for (size_t e = 0; e < experts_.size(); ++e) {
    const Expert& x = experts_[e];
    TORCH_CHECK(x.width > 0 && x.gate_up.N == 2 * x.width && x.gate_up.K == H_ && x.down.K == x.width &&
                x.down.N == H_, "haltwise native: expert ", e, "'s linears are missing or mis-shaped");
    TORCH_CHECK((int64_t)e >= E_ || x.width == experts_[0].width, "haltwise native: routed experts differ in width");
  }
}

int64_t MoeBlock::bucket_of(int64_t rows) const {
  int64_t b = 0;
  while (b + 1 < (int64_t)buckets_.size() && buckets_[b] < rows) ++b;
  return b;
}

// One row: softmax over the E logits, the k largest (equal: the lower index), their weights (renormalised when
// norm_), written in ascending expert index. topk_first_ (gpt-oss): the k largest logits, their softmax.
void MoeBlock::route(const float* logits, int64_t* picked, float* weights) const {
  std::vector<float> p(E_);
  if (topk_first_) {
    std::copy(logits, logits + E_, p.begin());
  } else {
    float top = logits[0];
    for (int64_t e = 1; e < E_; ++e) top = logits[e] > top ? logits[e] : top;
    float total = 0.0f;
    for (int64_t e = 0; e < E_; ++e) total += (p[e] = std::exp(logits[e] - top));
    for (int64_t e = 0; e < E_; ++e) p[e] /= total;
  }
  std::vector<bool> taken(E_, false);
  std::vector<int64_t> order(k_);            // by falling probability, as torch.topk returns them
  float sum = 0.0f;
  for (int64_t j = 0; j < k_; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E_; ++e)
      if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
    taken[best] = true;
    order[j] = best;
    sum += p[best];
  }
  if (topk_first_) {              // softmax over the k picked logits, in falling order (order[0] is the max)
    sum = 0.0f;
    for (int64_t i = 0; i < k_; ++i) sum += (p[order[i]] = std::exp(logits[order[i]] - logits[order[0]]));
    for (int64_t i = 0; i < k_; ++i) p[order[i]] /= sum;
  }
  int64_t j = 0;
  for (int64_t e = 0; e < E_; ++e) {
    if (!taken[e]) continue;
    picked[j] = e;
    weights[j++] = norm_ && !topk_first_ ? p[e] / sum : p[e];
  }
}

void MoeBlock::forward(const float* x, int64_t T, int64_t bucket, float* out) const {
  const int64_t R = router_.size(0), P = T * k_, rows_all = P + (shared_ ? T : 0);
  if (T == 0) return;
  std::vector<float> logits(T * R);
  run_dense(router_.data_ptr<float>(), R, H_, table_, x, T, logits.data());
  if (router_bias_.defined()) add_bias(router_bias_.data_ptr<float>(), logits.data(), T, E_, R);
  std::vector<int64_t> picked(P), count(E_, 0), row(P), token(rows_all);
  std::vector<float> weight(P);
  for (int64_t t = 0; t < T; ++t) {
    route(logits.data() + t * R, picked.data() + t * k_, weight.data() + t * k_);
    for (int64_t j = 0; j < k_; ++j) ++count[picked[t * k_ + j]];
  }
  // Groups in ascending expert index (the shared expert last, over every row), and each pick's grouped row.
  std::vector<Group> groups;
  std::vector<int64_t> first(E_, 0);
  int64_t at = 0, gu_at = 0, mid_at = 0;
  const auto add_group = [&](int64_t e, int64_t rows, int64_t group_bucket) {
    const Expert& xe = experts_[e];
    groups.push_back({&xe.gate_up, &xe.down, e, at, rows, xe.width, group_bucket, gu_at, mid_at});
    TORCH_CHECK(xe.gate_up.has(group_bucket) && xe.down.has(group_bucket), "haltwise native: expert ", e,
                " has no weight for row bucket ", group_bucket);
    at += rows;
    gu_at += rows * 2 * xe.width;
    mid_at += rows * xe.width;
  };
  for (int64_t e = 0; e < E_; ++e) {
    first[e] = at;
    if (count[e]) add_group(e, count[e], bucket_of(count[e]));
  }
  std::vector<int64_t> filled(first);
  for (int64_t p = 0; p < P; ++p) {
    row[p] = filled[picked[p]]++;
    token[row[p]] = p / k_;
  }
  if (shared_) {
    for (int64_t t = 0; t < T; ++t) token[P + t] = t;
    add_group(E_, T, bucket);
  }
  std::vector<int64_t> group_of(rows_all);
  for (int64_t g = 0; g < (int64_t)groups.size(); ++g)
    for (int64_t r = groups[g].first; r < groups[g].first + groups[g].rows; ++r) group_of[r] = g;
  bool dense_up = false;
  for (const Group& g : groups) dense_up = dense_up || !g.up->native_bucket[g.bucket];

  // gate_up inputs: each grouped row is its token's row, quantized from it (and copied where float32 runs).
  std::unique_ptr<float[]> xg = floats(dense_up ? rows_all * H_ : 0);
  Q8Rows xq;
  xq.resize(rows_all, H_);
  parallel_chunks(0, rows_all, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* src = x + token[r] * H_;
      if (groups[group_of[r]].up->native_bucket[groups[group_of[r]].bucket]) xq.quantize_row(table_, src, r);
      if (dense_up) std::copy(src, src + H_, xg.get() + r * H_);
    }
  });
  std::unique_ptr<float[]> gu = floats(gu_at), mid = floats(mid_at), y = floats(rows_all * H_);
  const std::vector<Task> up_tasks = tasks_for(groups, [](const Group& g) -> const StackLinear& { return *g.up; });
  parallel_chunks(0, (int64_t)up_tasks.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Group& g = groups[up_tasks[i].group];
      run_task(*g.up, g.bucket, table_, xq.rows(g.first, g.rows), dense_up ? xg.get() + g.first * H_ : nullptr, g.rows,
               gu.get() + g.gu_at, up_tasks[i].b, up_tasks[i].e);
    }
  });
  // act(g) * u per row, then the row's q8 for a native down (routed rows share one width; the shared expert's
  // rows have their own).
  Q8Rows routed_q, shared_q;
  const Expert& shared_expert = experts_.back();
  routed_q.resize(P, experts_[0].width % QK ? 0 : experts_[0].width);
  if (shared_) shared_q.resize(T, shared_expert.width % QK ? 0 : shared_expert.width);
  parallel_chunks(0, rows_all, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Group& g = groups[group_of[r]];
      float* m = mid.get() + g.mid_at + (r - g.first) * g.width;
      float* gur = gu.get() + g.gu_at + (r - g.first) * 2 * g.width;
      if (g.up->bias.defined()) add_bias(g.up->bias.data_ptr<float>(), gur, 1, g.up->N, g.up->N);
      if (clamped_) {
        clamped_glu(gur, g.width, alpha_, limit_, m);
      } else {
        table_.math.gated_rows(gur, 1, g.width, (int)act_, m);
      }
      if (g.down->native_bucket[g.bucket]) (r < P ? routed_q : shared_q).quantize_row(table_, m, r < P ? r : r - P);
    }
  });
  const std::vector<Task> down_tasks = tasks_for(groups, [](const Group& g) -> const StackLinear& { return *g.down; });
  parallel_chunks(0, (int64_t)down_tasks.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Group& g = groups[down_tasks[i].group];
      const ActQ8 act = g.expert < E_ ? routed_q.rows(g.first, g.rows) : shared_q.rows(0, g.rows);
      run_task(*g.down, g.bucket, table_, act, mid.get() + g.mid_at, g.rows, y.get() + g.first * H_,
               down_tasks[i].b, down_tasks[i].e);
    }
  });
  for (const Group& g : groups)
    if (g.down->bias.defined()) add_bias(g.down->bias.data_ptr<float>(), y.get() + g.first * H_, g.rows, H_, H_);
  // out[t] = ((0 + w_1 y_1) + w_2 y_2) + ... in ascending expert index, then + sigmoid(gate) * shared.
  parallel_chunks(0, T, std::max<int64_t>(1, 16384 / (k_ * H_)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = out + t * H_;
      std::fill(o, o + H_, 0.0f);
      for (int64_t j = 0; j < k_; ++j) {
        const float w = weight[t * k_ + j];
        const float* yr = y.get() + row[t * k_ + j] * H_;
        for (int64_t i = 0; i < H_; ++i) o[i] += w * yr[i];
      }
      if (shared_) {
        const float gate = 1.0f / (1.0f + std::exp(-logits[t * R + E_]));
        const float* yr = y.get() + (P + t) * H_;
        for (int64_t i = 0; i < H_; ++i) o[i] += gate * yr[i];
      }
    }
  });
}

torch::Tensor MoeBlock::run(const torch::Tensor& x, int64_t bucket) const {
  TORCH_CHECK(x.dim() == 2 && x.size(1) == H_ && x.scalar_type() == torch::kFloat32,
              "haltwise native: x must be (T, hidden) float32");
  check_complete();
  const torch::Tensor xc = x.contiguous();
  torch::Tensor out = torch::empty_like(xc);
  forward(xc.data_ptr<float>(), xc.size(0), bucket, out.data_ptr<float>());
  return out;
}

void register_moe_block(pybind11::module_& m) {
  pybind11::class_<MoeBlock, std::shared_ptr<MoeBlock>>(m, "MoeBlock")
      .def(pybind11::init<int64_t, int64_t, int64_t, bool, int64_t, const std::vector<int64_t>&,
                          const std::string&>())
      .def("set_router", &MoeBlock::set_router)
      .def("set_clamped_glu", &MoeBlock::set_clamped_glu)
      .def("set_expert", &MoeBlock::set_expert)
      .def("run", &MoeBlock::run, pybind11::call_guard<pybind11::gil_scoped_release>());
}

}  // namespace haltwise_native
