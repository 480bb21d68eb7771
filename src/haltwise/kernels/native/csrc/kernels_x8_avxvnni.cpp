// The 32-input row-interleaved records' kernels (x8_records.inc) with AVX-VNNI's vpdpbusd (VEX-encoded,
// the AVX2 hosts that have it: Intel's client cores since Alder Lake, AMD's since Zen 5): AVX2's arithmetic,
// one instruction a step where AVX2 spends two or three. Compiled for that ISA alone (the pragma below);
// ops.cpp calls them only where the CPU reports avx2, fma, f16c and avxvnni.
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avxvnni")
#include <immintrin.h>

#include "quant_kernels.h"

#define X8_PATH(name) name##_avxvnni
#define X8_DPBUSD(acc, u8, s8) _mm256_dpbusd_avx_epi32((acc), (u8), (s8))   // acc + the 4 u8 * s8 products
#include "x8_records.inc"

namespace haltwise_native {

const KernelTable& avxvnni_kernels() {
  static const KernelTable table = [] {
    KernelTable t = avx2_kernels();     // everything else is AVX2's: VNNI changes only the integer dots
    t.isa = "avxvnni";
    t.q4_0x8 = q4_0x8_rows_avxvnni, t.q4_1x8 = q4_1x8_rows_avxvnni, t.q8_0x8 = q8_0x8_rows_avxvnni;
    t.q5_0x8 = q5_0x8_rows_avxvnni, t.q4_kx8 = q4_kx8_rows_avxvnni, t.q6_kx8 = q6_kx8_rows_avxvnni;
    return t;
  }();
  return table;
}

}  // namespace haltwise_native

#endif  // __x86_64__
