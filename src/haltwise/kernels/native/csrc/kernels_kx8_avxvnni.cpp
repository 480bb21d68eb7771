// The K-quant row-interleaved records' kernels (kx8_records.inc) for AVX-VNNI's vpdpbusd (VEX-encoded).
// Compiled for that ISA alone (the pragma below); ops.cpp calls them only where the CPU reports avx2, fma,
// f16c and avxvnni.
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avxvnni")
#include <immintrin.h>

#include "quant_kernels.h"

#define X8_PATH(name) name##_avxvnni
#define X8_DPBUSD(acc, u8, s8) _mm256_dpbusd_avx_epi32((acc), (u8), (s8))   // acc + the 4 u8 * s8 products
#include "kx8_records.inc"

#endif  // __x86_64__
