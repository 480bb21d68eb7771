// The decode stack's paged attention on the AVX-512 path: attend_avx2.inc's code compiled again with
// ATTEND_ZMM, whose weighted-value sums take 16 values per vector (attend_kernels_avx2.inc head_values_by).
// The same operations per value in the same order, so the portable bits (tests/kernels/native/
// test_attention.py compares every path with the scalar one). Compiled for that ISA alone (the pragma
// below); the avx512vnni table (x8_records.inc) uses it where the CPU reports avx512f and avx512vl.
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")
#include <immintrin.h>

#include <algorithm>

#include "quant_kernels.h"

#define ATTEND_ZMM 1

namespace haltwise_native {
namespace {

#include "decode_math.inc"

#include "decode_math_avx2.inc"

#include "attend_kernels_avx2.inc"

#include "attend_avx2.inc"

}  // namespace

void attend_rows_avx512(const float* q, int64_t ldq_row, int64_t rows, int64_t G, const void* k_cache,
                        const void* v_cache, int kv_format, const int64_t* blocks, int64_t block_size,
                        int64_t kv_heads, int64_t kvh, int64_t D, const int64_t* starts, const int64_t* lens,
                        float scale, const float* sinks, float* out, int64_t ldo_row, float* scratch) {
  attend_rows_avx2(q, ldq_row, rows, G, k_cache, v_cache, kv_format, blocks, block_size, kv_heads, kvh, D, starts,
                   lens, scale, sinks, out, ldo_row, scratch);
}

}  // namespace haltwise_native
#endif  // __x86_64__
