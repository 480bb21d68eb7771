// The K-quant row-interleaved records' kernels (kx8_records.inc) for AVX2 + FMA + F16C. Compiled for that ISA alone (the pragma below); ops.cpp calls them only after
// the CPU reported all three flags.
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "quant_kernels.h"

#define X8_PATH(name) name##_avx2
#include "kx8_records.inc"

#endif  // __x86_64__
