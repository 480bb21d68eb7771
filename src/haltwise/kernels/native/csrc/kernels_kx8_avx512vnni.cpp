// The K-quant row-interleaved records' kernels (kx8_records.inc) for AVX512-VNNI's vpdpbusd on 256-bit
// vectors (AVX512-VL), and on 512-bit ones at every row count (kx8_pairs_zmm.inc). Compiled for that ISA alone (the pragma below); ops.cpp calls them only where the
// CPU reports avx2, fma, f16c, avx512f, avx512vl and avx512vnni.
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")
#include <immintrin.h>

#include "quant_kernels.h"

#define X8_PATH(name) name##_avx512vnni
#define X8_DPBUSD(acc, u8, s8) _mm256_dpbusd_epi32((acc), (u8), (s8))   // acc + the 4 u8 * s8 products
#define X8_ZMM 1   // from kx8_pairs_zmm.inc's kPairRows rows, two groups of 8 rows per 512-bit vector
#include "kx8_records.inc"

#endif  // __x86_64__
