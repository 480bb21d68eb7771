// Plain-C++ interface between the torch binding (ops.cpp) and the ISA-specific kernel files.
//
// Kernel files include nothing but this header and C intrinsics headers: a kernel file is compiled
// with its own target ISA (e.g. AVX2), and any inline function it shared with other files could be
// merged by the linker into code that runs on CPUs without that ISA.
#pragma once
#include <stdint.h>

namespace haltwise_native {

// GGUF block formats, numbered as ggml's GGMLQuantizationType.
enum QType : int { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q8_0 = 8, Q4_K = 12, Q6_K = 14, MXFP4 = 39 };

// MXFP4 (gpt-oss's experts): blocks of 32 inputs in 17 bytes, an e8m0 byte e then 16 bytes of 4-bit e2m1
// codes (input i the low nibble of byte i, input 16 + i its high nibble). Doubled, the e2m1 values are the
// integers kMxfp4Values (the half goes into the scale), so w = 2^(e - 128) * kMxfp4Values[code] exactly and
// a block's dot with q8 activations is an exact integer sum: acc += (x_d * 2^(e - 128)) * isum, block after
// block. Every ISA path does those float operations, in that order (scalar ones): the same bits.
constexpr int kMxfp4Bytes = 17;
constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as float32 (e = 0, 1: the subnormals 2^-128, 2^-127), as gguf/dequant.py decodes it.
static inline float mxfp4_scale(uint8_t e) {   // static: each kernel file its own copy
  const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Row-interleaved variants (codes 1000 + qtype): the same blocks, regrouped 8 output rows at a time
// so one 32-bit lane of a 256-bit register holds one row (see repack.py). Per group of 8 rows and
// block of 32 inputs, one record:
//     Q4_0X8: d[8] f16 | qs[4][8][4]          (144 bytes)
//     Q4_1X8: d[8] f16 | m[8] f16 | qs[4][8][4]  (160 bytes)
//     Q5_0X8: d[8] f16 | qh[8] u32 | qs[4][8][4]  (176 bytes; qh bits reordered, see repack.py)
//     Q8_0X8: d[8] f16 | qs[8][8][4]          (272 bytes)
// qs[j][r][t] is byte 4j + t of row r's original block (Q4: low nibble = input 4j + t, high nibble =
// input 16 + 4j + t; Q8_0: input 4j + t). The weight tensor is (groups, blocks * record); a kernel's
// row range [n0, n1) starts on a multiple of 8 and may end mid-group (the rest of it is padding).
// K-quants, per group and block of 256 inputs (sub-block j = inputs 32j..32j+31):
//     Q4_KX8: d[8] f16 | dmin[8] f16 | sc[8 j][8] u8 | mn[8 j][8] u8 | qs[4 c][8 s][8][4]      (1184 bytes)
//     Q6_KX8: d[8] f16 | sc[16][8] i8 | ql[4 c][8 s][8][4] | qh[2 h][8 s][8][4]           (1680 bytes)
// x[c][s][r][t] is byte 32c + 4s + t of row r's original qs / ql / qh. Q4_K: chunk c's low nibbles are
// sub-block 2c, its high nibbles 2c + 1 (sc, mn unpacked from the 12 packed bytes). Q6_K: sub-block
// j = 4h + u takes its low 4 bits from ql chunk 2h + u % 2 (nibble u / 2), its high 2 from qh half h
// (bits 2u, 2u + 1), and scale 2j + e for its inputs 16e..16e+15 (ggml's layout, moved).
enum QTypeX8 : int { Q4_0X8 = 1002, Q4_1X8 = 1003, Q5_0X8 = 1006, Q8_0X8 = 1008, Q4_KX8 = 1012, Q6_KX8 = 1014 };

constexpr int QK = 32;  // activation block: 32 inputs share one int8 scale (llama.cpp's q8 activations)

// Activations quantized per block of 32 inputs: x[m, k] ~= d[m, k / 32] * q[m, k].
struct ActQ8 {
  const int8_t* q;   // (M, K)
  const float* d;    // (M, K / 32) scale of each block
  const float* s;    // (M, K / 32) d * sum(q) of each block (offset terms of Q4_1 / Q4_K / Q4_0 / Q5_0)
  int64_t M, K;
  const int32_t* qsum128;  // (M, K / 32) 128 * sum(q) of each block, exact (Q8_0 records on the VNNI paths)
  const int32_t* qsum16x32;  // (M, K / 16) 32 * sum(q) of each 16 inputs, exact (Q6_K records, 512-bit path)
};

// The MXFP4 row loop every path shares: block_sum(blk, xq) is a block's exact integer sum, the rest the
// float operations stated at kMxfp4Values, in their order. Each kernel file passes its own block_sum.
template <class BlockSum>
static inline void mxfp4_rows(const uint8_t* w, int64_t row_bytes, const ActQ8& x, float* y, int64_t ldy,
                              int64_t n0, int64_t n1, BlockSum block_sum) {
  const int64_t nb = x.K / QK;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    for (int64_t m = 0; m < x.M; ++m) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = row + b * kMxfp4Bytes;
        acc += (x.d[m * nb + b] * mxfp4_scale(blk[0])) * (float)block_sum(blk, x.q + m * x.K + b * QK);
      }
      y[m * ldy + n] = acc;
    }
  }
}

// Asks for `bytes` from p to be brought into L2 (prefetcht1 on x86; a hint, it never faults). The record
// kernels fetch the next records with it while their first tile of activation rows runs on the current
// ones: the later tiles read those from L2, but the first waited on DRAM (x8_pairs_zmm.inc has figures).
inline void prefetch_l2(const uint8_t* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
}

// Part j of `Parts` of prefetch_l2(p, Bytes): the K-quant record kernels ask for the next records' lines a
// few at a time, one part per sub-block, rather than all at once. A record's 19-27 lines (two records' on
// the 512-bit pair order) asked for in one burst filled the core's L1 miss buffers, and the current
// block's own loads waited behind them: spread over the sub-blocks, a decode step of Qwen2.5-Coder-1.5B
// ran 17.4-19.0 -> 23.0-24.4 tok/s (Intel Xeon family 6 model 167, 2 threads, /work/notes/s23).
template <int Bytes, int Parts>
inline void prefetch_l2_part(const uint8_t* p, int j) {
  constexpr int kLines = (Bytes + 63) / 64;
  for (int l = kLines * j / Parts; l < kLines * (j + 1) / Parts; ++l) __builtin_prefetch(p + 64 * l, 0, 2);
}

// y[m * ldy + n] = sum_k W[n, k] * x[m, k] for rows n in [n0, n1) and every m.
// w: the (N, row_bytes) raw block matrix. One call per chunk of rows (thread_pool.h).
using RowsKernel = void (*)(const uint8_t* w, int64_t row_bytes, const ActQ8& x, float* y, int64_t ldy,
                            int64_t n0, int64_t n1);

// Quantize rows [m0, m1) of x (M, K) float32 (K % 32 == 0): q (M, K), d and s (M, K / 32) as in ActQ8.
using QuantizeKernel = void (*)(const float* x, int64_t K, int8_t* q, float* d, float* s, int64_t m0, int64_t m1);

// How the KV cache stores one (position, kv head) row of D values (decode_math.inc reads them in place):
//     KV_F32: D float32; KV_BF16: D bfloat16 (the high half of the float32, rounded to nearest even);
//     KV_Q8:  D int8 then one float32 scale (D + 4 bytes): value = q * scale, scale = max|x| / 127.
enum KVFormat : int { KV_F32 = 0, KV_BF16 = 1, KV_Q8 = 2 };

// Bytes of one stored row of D values in `format`.
inline int64_t kv_row_bytes(int format, int64_t D) {
  return format == KV_F32 ? 4 * D : format == KV_BF16 ? 2 * D : D + 4;
}

// Positions attention takes at a time on a vector path: their K/V rows and weights stay in L1/L2 while
// every group of query vectors (scores) and every 8 values of D (values) go over them. Attention's
// scratch (attend_scratch_floats) holds (query vectors + 1) x positions + kAttendExtraScratch floats:
// scores, V row scales, then a block of one group's weights (8 x kPositionBlock); then each vector's int8
// query (KV_Q8 scores: q8_query_floats each), a block of V rows as float32 or int16 pairs (kPositionBlock x
// D), each vector's 1 / softmax total (KV_Q8), and D floats, the scalar path's dequantized row; then (KV_Q8
// on the 512-bit path) a block of K rows transposed for the scores, 64-byte aligned, and their scales.
constexpr int64_t kPositionBlock = 128;
constexpr int64_t kAttendExtraScratch = 8 * kPositionBlock;

// One int8 query vector (decode_math.inc quantize_query_into): its scale and sum (2 floats), then its D
// values and their magnitudes, each zero padded to q8_padded(D) bytes (the vector paths read whole pieces).
constexpr int64_t q8_padded(int64_t D) { return (D + 63) / 64 * 64; }
constexpr int64_t q8_query_floats(int64_t D) { return 2 + q8_padded(D) / 2; }
constexpr int64_t attend_scratch_floats(int64_t vectors, int64_t positions, int64_t D) {
  return (vectors + 1) * positions + kAttendExtraScratch + vectors * q8_query_floats(D) + kPositionBlock * D +
         vectors + D + kPositionBlock * q8_padded(D) / 4 + 16 + kPositionBlock;
}

// The decode step's float32 math (decode_math.inc documents each).
struct MathKernels {
  void (*rms_norm_rows)(const float* x, int64_t ldx, const float* w, float eps, bool plus_one, float* y,
                        int64_t ldy, int64_t rows, int64_t dim);
  void (*rope_rows)(float* x, int64_t ld, int64_t heads, const float* cos, const float* sin, int64_t D);
  // Paged attention of `rows` rows of one sequence (decode_math.inc attend_rows_impl): each row gets
  // attend_t's values for it alone (a decode row is one row). sinks: kv head kvh's G query heads' sink
  // logits (gpt-oss), or null.
  void (*attend_rows)(const float* q, int64_t ldq_row, int64_t rows, int64_t G, const void* k_cache,
                      const void* v_cache, int kv_format, const int64_t* blocks, int64_t block_size,
                      int64_t kv_heads, int64_t kvh, int64_t D, const int64_t* starts, const int64_t* lens,
                      float scale, const float* sinks, float* out, int64_t ldo_row, float* scratch);
  // Store rows [0, rows) of x (rows of D float32, ldx apart) as cache rows dst_rows[i] in `kv_format`.
  void (*store_kv)(const float* x, int64_t ldx, int64_t rows, void* cache, int kv_format, const int64_t* dst_rows,
                   int64_t D);
  void (*gated_rows)(const float* gu, int64_t rows, int64_t I, int act, float* y);
  // y[m * ldy + n] = W[n, :] . x[m, :] in float32 for rows n in [n0, n1) of the (N, K) weight, every m.
  void (*dense_rows)(const float* w, const float* x, int64_t M, int64_t K, float* y, int64_t ldy, int64_t n0,
                     int64_t n1);
  // The first index of the largest of x[0..n), 1 <= n < 2^31, as torch.max(dim) picks it. x holds no NaN
  // (the sampler zeroes a row that holds one before it picks); -inf and +inf are ordinary values.
  int64_t (*argmax)(const float* x, int64_t n);
};

// The kernels of one ISA; a null entry means "not implemented for this ISA: use the scalar one".
struct KernelTable {
  const char* isa;
  QuantizeKernel quantize;
  RowsKernel q4_0, q4_1, q5_0, q8_0, q4_k, q6_k;
  RowsKernel q4_0x8, q4_1x8, q8_0x8, q5_0x8, q4_kx8, q6_kx8;
  MathKernels math;
  RowsKernel mxfp4;      // MXFP4 blocks (last: a table that leaves it out runs the scalar one)
};

// The K-quant row-interleaved kernels of the scalar path (kernels_kx8_scalar.cpp), RowsKernel's contract;
// below, the AVX2 path's six (kernels_x8_avx2.cpp, kernels_kx8_avx2.cpp: called only where the CPU reports
// avx2, fma and f16c).
void q4_kx8_rows_scalar(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                        int64_t n1);
void q6_kx8_rows_scalar(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                        int64_t n1);
#if defined(__x86_64__)
// The six row-interleaved record kernels of one x86 path, RowsKernel's contract, named <kernel>_<path>.
#define HALTWISE_X8_KERNELS(path)                                                                         \
  void q4_0x8_rows_##path(const uint8_t*, int64_t, const ActQ8&, float*, int64_t, int64_t, int64_t);     \
  void q4_1x8_rows_##path(const uint8_t*, int64_t, const ActQ8&, float*, int64_t, int64_t, int64_t);     \
  void q8_0x8_rows_##path(const uint8_t*, int64_t, const ActQ8&, float*, int64_t, int64_t, int64_t);     \
  void q5_0x8_rows_##path(const uint8_t*, int64_t, const ActQ8&, float*, int64_t, int64_t, int64_t);     \
  void q4_kx8_rows_##path(const uint8_t*, int64_t, const ActQ8&, float*, int64_t, int64_t, int64_t);     \
  void q6_kx8_rows_##path(const uint8_t*, int64_t, const ActQ8&, float*, int64_t, int64_t, int64_t);
HALTWISE_X8_KERNELS(avx2)
// The same six with VNNI's dot-product instruction, one file pair per encoding (kernels_x8_<path>.cpp,
// kernels_kx8_<path>.cpp): AVX512-VNNI on 256-bit vectors (EVEX, with AVX512-VL) and AVX-VNNI (VEX, AVX2
// hosts that have it). The same bits as the AVX2 ones.
HALTWISE_X8_KERNELS(avx512vnni)
HALTWISE_X8_KERNELS(avxvnni)
#undef HALTWISE_X8_KERNELS
// MathKernels::attend_rows with 512-bit value sums (kernels_attend_avx512.cpp): AVX2's bits.
void attend_rows_avx512(const float* q, int64_t ldq_row, int64_t rows, int64_t G, const void* k_cache,
                        const void* v_cache, int kv_format, const int64_t* blocks, int64_t block_size,
                        int64_t kv_heads, int64_t kvh, int64_t D, const int64_t* starts, const int64_t* lens,
                        float scale, const float* sinks, float* out, int64_t ldo_row, float* scratch);
#endif

const KernelTable& scalar_kernels();
#if defined(__x86_64__)
const KernelTable& avx2_kernels();        // caller checks the CPU reports avx2, fma and f16c
const KernelTable& avx512vnni_kernels();  // ... and avx512f, avx512vl and avx512vnni
const KernelTable& avxvnni_kernels();     // ... and avxvnni
#endif

}  // namespace haltwise_native
