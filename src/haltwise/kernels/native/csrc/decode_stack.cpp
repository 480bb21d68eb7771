// DecodeStack: every decoder layer of one step in a single call. Rows are tokens, each with its own
// position, slot, block table and context length (a decode row is its sequence's next token; prefill rows
// are consecutive positions of one sequence); h (T, hidden) is updated in place layer by layer:
//
//     x = norm(h); qkv = x W_qkv (+ b); [q/k head norms]; rope(q, k); cache[slot] = k, v   (every row)
//     a = attention(q, cache in place over [start, len) of the row's sequence)             (every row)
//         [gpt-oss: each head's sink logit joins its softmax's max and total]
//     o = a W_o; [o = norm(o)]; h += o
//     x = norm(h); g, u = x W_gate_up; m = act(g) * u; d = m W_down; [d = norm(d)]; h += d
//                  (an MoE layer: d = the MoE block's output for x, moe_block.cpp)
//
// Every row's K/V is written before any row attends, so a prefill row sees the rows before it in its
// chunk exactly as a later decode would see them.
//
// Batch invariance (the default path's determinism rests on it): everything a row gets is computed from
// that row alone, in a fixed order: norms, RoPE, q8 activation quantization, each output of a linear (one
// dot product per output element), the row's attention over its own context, the activation. Threads split
// output elements or (row, kv head) tasks, never a reduction. So a row's bits never depend on the other
// rows, their number, the chunk it came in, or the thread count.
//
// A linear runs on its raw GGUF blocks (q8 activations, run_linear) or on a float32 weight (run_dense), per
// row bucket as the kernel plan chose; the norms, RoPE, KV writes, attention and activation are the
// float32 kernels of decode_math.inc for the CPU's ISA. Threads: parallel_chunks (thread_pool.h) over
// weight rows and over (row, kv head) pairs of the attention.
//
// Progress: forward runs with the GIL released and adds to `beats` after each layer's attention and after
// each layer, so the engine's watchdog (another thread) tells a long step that computes from a stuck one.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <atomic>
#include <memory>
#include <vector>

#include "moe_block.h"
#include "native_linear.h"
#include "row_tiles.h"
#include "stack_checks.h"
#include "stack_linear.h"
#include "thread_pool.h"

namespace haltwise_native {
namespace {

struct StackLayer {
  std::vector<torch::Tensor> norms;     // input, post-attention[, pre-feedforward, post-feedforward]
  std::vector<torch::Tensor> qk_norms;  // q, k head norms, or empty
  torch::Tensor sinks;                  // (heads,) attention sink logits (gpt-oss), or undefined
  int64_t window = 0;                   // 0 = full context
  bool local_rope = false;
  float scale = 1.0f;
  StackLinear linears[4];               // qkv, o, gate_up, down (gate_up, down unset under an MoE block)
  std::shared_ptr<MoeBlock> moe;        // the layer's mixture of experts (moe_block.cpp), or null
};

enum Slot { QKV = 0, O = 1, GATE_UP = 2, DOWN = 3 };

}  // namespace

class DecodeStack {
 public:
  DecodeStack(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t hidden, int64_t intermediate,
              double eps, bool plus_one, int64_t act, bool sandwich, const std::string& isa)
      : H_(heads), KVH_(kv_heads), D_(head_dim), hidden_(hidden), I_(intermediate), eps_((float)eps),
        plus_one_(plus_one), act_(act), sandwich_(sandwich), table_(table_for(isa)) {
    TORCH_CHECK(heads % kv_heads == 0 && head_dim % 8 == 0 && hidden % 8 == 0,
                "haltwise native: DecodeStack needs heads % kv_heads == 0 and head_dim, hidden multiples of 8");
    rotary_ = head_dim;
  }

  // Partial rotary (phi3): RoPE turns each head's leading `dims` only; the tables keep D values a row.
  void set_rotary_dim(int64_t dims) {
    TORCH_CHECK(dims > 0 && dims <= D_ && dims % 2 == 0, "haltwise native: rotary dims must be even, <= head_dim");
    rotary_ = dims;
  }

  void add_layer(const std::vector<torch::Tensor>& norms, const std::vector<torch::Tensor>& qk_norms,
                 int64_t window, bool local_rope, double scale, const torch::Tensor& sinks) {
    TORCH_CHECK(norms.size() == (sandwich_ ? 4u : 2u), "haltwise native: wrong number of layer norms");
    StackLayer layer;
    if (sinks.defined() && sinks.numel()) layer.sinks = float_vector(sinks, H_);
    for (const auto& n : norms) layer.norms.push_back(float_vector(n, hidden_));
    for (const auto& n : qk_norms) layer.qk_norms.push_back(float_vector(n, D_));
    layer.window = window;
    layer.local_rope = local_rope;
    layer.scale = (float)scale;
    layers_.push_back(std::move(layer));
  }

  // Sets linear `slot` (0 qkv, 1 o, 2 gate_up, 3 down) of the last added layer.
  void set_linear(int64_t slot, const std::vector<torch::Tensor>& weights, const std::vector<int64_t>& qtypes,
                  const std::vector<int64_t>& rows, const torch::Tensor& dense, const torch::Tensor& bias,
                  const std::vector<bool>& native_bucket, int64_t out_features, int64_t in_features) {
    TORCH_CHECK(!layers_.empty() && slot >= 0 && slot < 4, "haltwise native: set_linear before add_layer");
    layers_.back().linears[slot] = make_stack_linear(weights, qtypes, rows, dense, bias, native_bucket, out_features,
                                                     in_features, table_);
  }

  // The last added layer's MLP is `block` (every expert set), in place of gate_up / down.
  void set_moe(std::shared_ptr<MoeBlock> block) {
    TORCH_CHECK(!layers_.empty() && block && block->hidden() == hidden_, "haltwise native: set_moe before add_layer");
    block->check_complete();
    layers_.back().moe = std::move(block);
  }

  // Bounds of everything forward() indexes with, checked before anything is written (always on: O(T x blocks)
  // integer compares against a step's matmuls, and no arithmetic changes, so the kernels' bits do not), for the
  // full-context layers' slots and tables against their caches and the sliding layers' against theirs:
  //   0 <= slot[t] < num_blocks x block_size                       (the K/V write of row t)
  //   1 <= len[t] <= table width x block_size                       (positions row t attends to)
  //   0 <= table[t][j] < num_blocks for j < ceil(len[t] / block_size)  (the blocks those positions are in)
  //   cos/sin (and the local pair when given) hold T x D values     (row t's rotation)
  // A violation is a Python RuntimeError, never a write or read outside the caches.
  // h (T, hidden) float32, updated in place and returned. cos/sin (T, D) for global layers and
  // cos_local/sin_local for local-rope layers (may be undefined when no layer uses them); caches
  // (num_blocks, block_size, KVH, D) float32 or bfloat16, or (num_blocks, block_size, KVH, D + 4) int8
  // (KV_Q8: D values and a float32 scale per row), per layer; slots (T,), block_tables (T, nb), seq_lens
  // (T,) int64 (a row's context length: its position + 1). Sliding layers (window > 0) write and read through
  // window_slots / window_tables: their own pool, whose caches may hold fewer blocks (or the same tensors
  // as slots / block_tables when they share the main pool).
  torch::Tensor forward(torch::Tensor h, int64_t bucket, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& cos_local, const torch::Tensor& sin_local,
                        const std::vector<torch::Tensor>& k_caches, const std::vector<torch::Tensor>& v_caches,
                        const torch::Tensor& slots, const torch::Tensor& block_tables,
                        const torch::Tensor& window_slots, const torch::Tensor& window_tables,
                        const torch::Tensor& seq_lens) {
    TORCH_CHECK(h.is_contiguous() && h.scalar_type() == torch::kFloat32 && h.dim() == 2 && h.size(1) == hidden_,
                "haltwise native: h must be contiguous (T, hidden) float32");
    TORCH_CHECK(k_caches.size() == layers_.size() && v_caches.size() == layers_.size(),
                "haltwise native: one K and one V cache per layer");
    const int64_t T = h.size(0), q_size = H_ * D_, kv_size = KVH_ * D_, width = q_size + 2 * kv_size;
    check_bounds(layers_, D_, T, cos, sin, cos_local, sin_local, k_caches, slots, block_tables, window_slots,
                 window_tables, seq_lens);
    const auto opts = h.options();
    torch::Tensor x = torch::empty({T, hidden_}, opts), qkv = torch::empty({T, width}, opts);
    torch::Tensor attn = torch::empty({T, q_size}, opts), proj = torch::empty({T, hidden_}, opts);
    torch::Tensor gu = torch::empty({T, 2 * I_}, opts), mid = torch::empty({T, I_}, opts);
    const int64_t* lens = seq_lens.data_ptr<int64_t>();
    int64_t longest = 0;
    for (int64_t t = 0; t < T; ++t) longest = std::max(longest, lens[t]);
    const int64_t G = H_ / KVH_;
    bool sliding = false;
    for (const StackLayer& L : layers_) sliding = sliding || L.window > 0;
    const std::vector<RowTile> tiles = row_tiles(block_tables, T);
    const std::vector<RowTile> window_tiles = sliding ? row_tiles(window_tables, T) : tiles;
    int64_t tile_rows = 1;
    for (const auto* list : {&tiles, &window_tiles})
      for (const RowTile& tile : *list) tile_rows = std::max(tile_rows, tile.rows);
    // attend_rows' scratch (decode_math.inc)
    const int64_t per_thread = attend_scratch_floats(tile_rows * G, std::max<int64_t>(longest, 1), D_);
    std::vector<float> scratch(pool_threads() * per_thread);
    std::vector<int64_t> starts(T);
    const int kv_format = k_caches.empty() ? (int)KV_F32 : format_of(k_caches[0]);
    std::vector<int64_t> rows_of(KVH_);
    const MathKernels& m = table_.math;
    float* hp = h.data_ptr<float>();

    for (size_t li = 0; li < layers_.size(); ++li) {
      const StackLayer& L = layers_[li];
      const torch::Tensor& kc = k_caches[li];
      const torch::Tensor& vc = v_caches[li];
      const int64_t block_size = kc.size(1);
      TORCH_CHECK(format_of(kc) == kv_format && kc.is_contiguous() && vc.is_contiguous() &&
                  vc.sizes() == kc.sizes() && vc.scalar_type() == kc.scalar_type() && kc.size(2) == KVH_ &&
                  kc.size(3) * kc.element_size() == kv_row_bytes(kv_format, D_) &&
                  kc.size(1) == k_caches[0].size(1),
                  "haltwise native: caches must be contiguous (blocks, block_size, KVH, D) float32 / bfloat16 "
                  "or (blocks, block_size, KVH, D + 4) int8, one format and block size for every layer");
      const torch::Tensor& layer_slots = L.window > 0 ? window_slots : slots;
      const torch::Tensor& layer_tables = L.window > 0 ? window_tables : block_tables;
      const int64_t* slot = layer_slots.data_ptr<int64_t>();
      const int64_t nb = layer_tables.size(1);
      const int64_t* tables = layer_tables.data_ptr<int64_t>();
      m.rms_norm_rows(hp, hidden_, L.norms[0].data_ptr<float>(), eps_, plus_one_, x.data_ptr<float>(), hidden_, T, hidden_);
      linear(L.linears[QKV], bucket, x, qkv);
      float* qp = qkv.data_ptr<float>();
      if (!L.qk_norms.empty()) {
        for (int64_t t = 0; t < T; ++t) {
          float* row = qp + t * width;
          m.rms_norm_rows(row, D_, L.qk_norms[0].data_ptr<float>(), eps_, plus_one_, row, D_, H_, D_);
          m.rms_norm_rows(row + q_size, D_, L.qk_norms[1].data_ptr<float>(), eps_, plus_one_, row + q_size, D_, KVH_, D_);
        }
      }
      const torch::Tensor& c = L.local_rope ? cos_local : cos;
      const torch::Tensor& s = L.local_rope ? sin_local : sin;
      void* kcp = kc.data_ptr();
      void* vcp = vc.data_ptr();
      for (int64_t t = 0; t < T; ++t) {
        float* row = qp + t * width;
        m.rope_rows(row, D_, H_ + KVH_, c.data_ptr<float>() + t * D_, s.data_ptr<float>() + t * D_, rotary_);
        for (int64_t h = 0; h < KVH_; ++h) rows_of[h] = slot[t] * KVH_ + h;
        m.store_kv(row + q_size, D_, KVH_, kcp, kv_format, rows_of.data(), D_);
        m.store_kv(row + q_size + kv_size, D_, KVH_, vcp, kv_format, rows_of.data(), D_);
      }
      float* ap = attn.data_ptr<float>();
      const float scale = L.scale;
      for (int64_t t = 0; t < T; ++t) starts[t] = L.window > 0 && lens[t] > L.window ? lens[t] - L.window : 0;
      const std::vector<RowTile>& layer_tiles = L.window > 0 ? window_tiles : tiles;
      const int64_t num_tiles = (int64_t)layer_tiles.size();
      int64_t positions = 0;                          // summed over rows: the tasks' multiply-adds / (2 G D)
      for (int64_t t = 0; t < T; ++t) positions += lens[t] - starts[t];
      const int64_t task_work = std::max<int64_t>(1, 2 * G * D_ * positions / num_tiles);
      parallel_chunks(0, num_tiles * KVH_, std::max<int64_t>(1, kMinChunkWork / task_work), [&](int64_t b, int64_t e) {
        float* mine = scratch.data() + pool_thread_index() * per_thread;
        for (int64_t task = b; task < e; ++task) {
          // the last tiles first: a prefill chunk's latest rows attend to the most positions, and a
          // chunk claimed early leaves the short ones to even out the threads' shares at the end
          const RowTile& tile = layer_tiles[num_tiles - 1 - task / KVH_];
          const int64_t t = tile.first, kvh = task % KVH_;
          m.attend_rows(qp + t * width + kvh * G * D_, width, tile.rows, G, kcp, vcp, kv_format, tables + t * nb,
                        block_size, KVH_, kvh, D_, starts.data() + t, lens + t, scale,
                        L.sinks.defined() ? L.sinks.data_ptr<float>() + kvh * G : nullptr,
                        ap + t * q_size + kvh * G * D_, q_size, mine);
        }
      });
      beats_.fetch_add(1, std::memory_order_relaxed);
      linear(L.linears[O], bucket, attn, proj);
      residual(L, 1, proj, hp, T, m);
      m.rms_norm_rows(hp, hidden_, L.norms[sandwich_ ? 2 : 1].data_ptr<float>(), eps_, plus_one_, x.data_ptr<float>(),
                      hidden_, T, hidden_);
      if (L.moe) {
        L.moe->forward(x.data_ptr<float>(), T, bucket, proj.data_ptr<float>());
      } else {
        linear(L.linears[GATE_UP], bucket, x, gu);
        float* gup = gu.data_ptr<float>();
        float* midp = mid.data_ptr<float>();
        parallel_chunks(0, T, 4, [&](int64_t r0, int64_t r1) {
          m.gated_rows(gup + r0 * 2 * I_, r1 - r0, I_, (int)act_, midp + r0 * I_);
        });
        linear(L.linears[DOWN], bucket, mid, proj);
      }
      residual(L, 3, proj, hp, T, m);
      beats_.fetch_add(1, std::memory_order_relaxed);
    }
    return h;
  }

  int64_t num_layers() const { return (int64_t)layers_.size(); }
  // Two per layer run since construction: read by the watchdog while forward runs (GIL released).
  int64_t beats() const { return beats_.load(std::memory_order_relaxed); }

 private:
  void linear(const StackLinear& l, int64_t bucket, const torch::Tensor& x, torch::Tensor& y) const {
    run_stack_linear(l, bucket, table_, x.data_ptr<float>(), x.size(0), y.data_ptr<float>());
  }

  // h += out, where sandwich models norm the sub-layer output first (norm index 1 or 3).
  void residual(const StackLayer& L, int norm, torch::Tensor& out, float* hp, int64_t T, const MathKernels& m) const {
    float* op = out.data_ptr<float>();
    if (sandwich_) m.rms_norm_rows(op, hidden_, L.norms[norm].data_ptr<float>(), eps_, plus_one_, op, hidden_, T, hidden_);
    for (int64_t i = 0; i < T * hidden_; ++i) hp[i] += op[i];
  }

  int64_t H_, KVH_, D_, hidden_, I_;
  int64_t rotary_;                      // leading dims of a head RoPE rotates (D_ unless partial)
  float eps_;
  bool plus_one_;
  int64_t act_;
  bool sandwich_;
  const KernelTable& table_;
  std::vector<StackLayer> layers_;
  std::atomic<int64_t> beats_{0};
};

void register_decode_stack(pybind11::module_& m) {
  pybind11::class_<DecodeStack>(m, "DecodeStack")
      .def(pybind11::init<int64_t, int64_t, int64_t, int64_t, int64_t, double, bool, int64_t, bool,
                          const std::string&>())
      .def("add_layer", &DecodeStack::add_layer)
      .def("set_linear", &DecodeStack::set_linear)
      .def("set_rotary_dim", &DecodeStack::set_rotary_dim)
      .def("set_moe", &DecodeStack::set_moe)
      // forward reads only the tensors its caller holds alive: other Python threads (the event loop, the
      // watchdog) run meanwhile
      .def("forward", &DecodeStack::forward, pybind11::call_guard<pybind11::gil_scoped_release>())
      .def_property_readonly("num_layers", &DecodeStack::num_layers)
      .def_property_readonly("beats", &DecodeStack::beats);
}

}  // namespace haltwise_native
