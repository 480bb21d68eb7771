// AVX2 + FMA + F16C kernels for the 32-input row-interleaved records (Q4_0X8, Q4_1X8, Q8_0X8, Q5_0X8 in
// quant_kernels.h). Compiled for that ISA alone (the pragma below); ops.cpp calls them only after the CPU
// reported all three flags. The scalar twin, and the reference they are tested against, is rows_x8 in
// kernels_scalar.cpp.
//
// Lane r of every vector is output row 8g + r. Step s of a block multiplies inputs 4s..4s+3: the weight
// vector holds those 4 bytes of each of the 8 rows, the activation vector the same 4 bytes of x broadcast
// to every lane. Q4 steps add up in int16 (8 steps * 2 * 15 * 127 < 32768); Q5_0's weights are 0..31
// (bias 16 in the offset), widened every 4 steps (4 * 2 * 31 * 127 < 32768); Q8_0 steps widen to int32
// each time (sign trick: |w| unsigned, x carrying w's sign).
//
// Three loop orders, one arithmetic. Per group of 8 weight rows:
//   tile   (Q4_0, Q4_1; Q5_0 under kSpanRows rows): per tile of MT activation rows, every block: decode
//          its 8 step vectors into registers, then each row of the tile takes all 8 steps.
//   steps  (Q8_0): per tile, every block: step by step, each step's vector feeding the tile's rows
//          (the 8 steps and their |w| held across the rows spilled registers: ~3/4 the speed).
//   span   (Q5_0 from kSpanRows rows): per span of up to kSpan rows, every block: decode its 8 steps
//          once into L1, then step by step over each tile of the span (the decode, 3 ops a step for
//          Q5_0's fifth bit, is paid once per span instead of once per tile).
// Measured on a Zen 3 core: Q8_0's steps order ~1.25x the tile order at 4-64 rows; Q5_0's span order
// ~1.2x at 16-64 rows but slower under 12 (a span of few rows pays its decode for few); Q4 fastest in
// the tile order. Batch invariant: every order computes the same exact integer sums and
// then, per activation row, the same float instructions block by block in one order, so a row's bits
// never depend on the loop order, the tile, the span or the rows beside it (the tests compare bits
// across row counts that cross kSpanRows and kSpan).
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "quant_kernels.h"

namespace haltwise_native {
namespace {

constexpr int64_t kSpan = 64;       // activation rows per span (their accumulators: kSpan * 32 bytes)
constexpr int64_t kSpanRows = 16;   // Q5_0 takes the span order from this many activation rows

inline __m256i load32(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }

// Kind: 0 Q4_0, 1 Q4_1, 2 Q8_0, 3 Q5_0.
template <int Kind>
struct X8Record {
  static constexpr int kBytes = Kind == 0 ? 144 : Kind == 1 ? 160 : Kind == 2 ? 272 : 176;
  static constexpr int kQs = Kind == 1 ? 32 : Kind == 3 ? 48 : 16;       // offset of the quants
};

// A block's 8 step vectors: Q4 0..15, Q5_0 0..31, Q8_0 -128..127.
template <int Kind>
inline void decode_steps(const uint8_t* blk, __m256i* w) {
  constexpr int qoff = X8Record<Kind>::kQs;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if (Kind == 2) {
    for (int s = 0; s < 8; ++s) w[s] = load32(blk + qoff + 32 * s);
  } else if (Kind == 3) {
    const __m256i qh = load32(blk + 16), bit0 = _mm256_set1_epi32(0x01010101);
    for (int s = 0; s < 4; ++s) {
      const __m256i q = load32(blk + qoff + 32 * s);
      const __m256i hi_lo = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh, s), bit0), 4);
      const __m256i hi_hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh, s + 4), bit0), 4);
      w[s] = _mm256_or_si256(_mm256_and_si256(q, low4), hi_lo);
      w[s + 4] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), hi_hi);
    }
  } else {
    for (int s = 0; s < 4; ++s) {
      const __m256i q = load32(blk + qoff + 32 * s);
      w[s] = _mm256_and_si256(q, low4);
      w[s + 4] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    }
  }
}

inline __m256i bcast4(const int8_t* xq, int s) { return _mm256_set1_epi32(*(const int32_t*)(xq + 4 * s)); }

// isum[j] = the exact integer dot product of a block's 8 rows (steps w) with activation block xq[j].
// Q4 and Q5_0 only (their weights are unsigned). RowsOuter: each row takes all 8 steps in turn (one
// int16 sum live: the tile order); else step by step, rows innermost (the span order).
template <int Kind, int MT, bool RowsOuter>
inline void unsigned_sums(const __m256i* w, const int8_t* const* xq, __m256i* isum) {
  constexpr int kWiden = Kind == 3 ? 4 : 8;                // steps summed in int16 before widening
  const __m256i ones = _mm256_set1_epi16(1);
  if (RowsOuter) {
    for (int j = 0; j < MT; ++j) {
      for (int s0 = 0; s0 < 8; s0 += kWiden) {
        __m256i s16 = _mm256_maddubs_epi16(w[s0], bcast4(xq[j], s0));
        for (int s = s0 + 1; s < s0 + kWiden; ++s) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[s], bcast4(xq[j], s)));
        const __m256i wide = _mm256_madd_epi16(s16, ones);
        isum[j] = s0 ? _mm256_add_epi32(isum[j], wide) : wide;
      }
    }
    return;
  }
  __m256i s16[MT];                                         // set at s = 0 and s = kWiden
#pragma GCC unroll 8   // fully: the s % kWiden branches then fold
  for (int s = 0; s < 8; ++s) {
    for (int j = 0; j < MT; ++j) {
      const __m256i p = _mm256_maddubs_epi16(w[s], bcast4(xq[j], s));
      s16[j] = s % kWiden ? _mm256_add_epi16(s16[j], p) : p;
    }
    if (s % kWiden == kWiden - 1) {
      for (int j = 0; j < MT; ++j) {
        const __m256i wide = _mm256_madd_epi16(s16[j], ones);
        isum[j] = s == kWiden - 1 ? wide : _mm256_add_epi32(isum[j], wide);
      }
    }
  }
}

// Q8_0: step by step from the record, rows innermost.
template <int MT>
inline void q8_0_sums(const uint8_t* blk, const int8_t* const* xq, __m256i* isum) {
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
  for (int s = 0; s < 8; ++s) {
    const __m256i w = load32(blk + X8Record<2>::kQs + 32 * s), mag = _mm256_sign_epi8(w, w);
    for (int j = 0; j < MT; ++j) {
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(bcast4(xq[j], s), w)), ones);
      isum[j] = s ? _mm256_add_epi32(isum[j], p) : p;
    }
  }
}

// acc[j] += the block's terms for activation row m0 + j: (d * xd) * isum, then offset * xs.
template <int Kind, int MT>
inline void add_block(const uint8_t* blk, const __m256i* isum, const ActQ8& x, int64_t m0, int64_t b, __m256* acc) {
  const int64_t nxb = x.K / QK;
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)blk));
  __m256 offset = _mm256_setzero_ps();                       // per-row multiplier of xs
  if (Kind == 0) offset = _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
  if (Kind == 3) offset = _mm256_mul_ps(d, _mm256_set1_ps(-16.0f));
  if (Kind == 1) offset = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(blk + 16)));
  for (int j = 0; j < MT; ++j) {
    const int64_t xb = (m0 + j) * nxb + b;
    acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.d[xb])), _mm256_cvtepi32_ps(isum[j]), acc[j]);
    if (Kind != 2) acc[j] = _mm256_fmadd_ps(offset, _mm256_set1_ps(x.s[xb]), acc[j]);
  }
}

// The tile and steps orders: activation rows m0..m0+MT-1, every block, accumulators in registers.
template <int Kind, int MT>
inline void group_tile(const uint8_t* grp, int64_t nb, const ActQ8& x, int64_t m0, __m256* acc) {
  for (int j = 0; j < MT; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = grp + b * X8Record<Kind>::kBytes;
    const int8_t* xq[MT];
    for (int j = 0; j < MT; ++j) xq[j] = x.q + (m0 + j) * x.K + b * QK;
    __m256i isum[MT];
    if (Kind == 2) {
      q8_0_sums<MT>(blk, xq, isum);
    } else {
      __m256i w[8];
      decode_steps<Kind>(blk, w);
      unsigned_sums<Kind, MT, true>(w, xq, isum);
    }
    add_block<Kind, MT>(blk, isum, x, m0, b, acc);
  }
}

// One tile of the span order: rows m0..m0+MT-1 of block b, whose steps w are decoded.
template <int Kind, int MT>
inline void span_tile(const uint8_t* blk, const __m256i* w, const ActQ8& x, int64_t m0, int64_t b, __m256* acc) {
  const int8_t* xq[MT];
  for (int j = 0; j < MT; ++j) xq[j] = x.q + (m0 + j) * x.K + b * QK;
  __m256i isum[MT];
  unsigned_sums<Kind, MT, false>(w, xq, isum);
  add_block<Kind, MT>(blk, isum, x, m0, b, acc);
}

// The span order: rows m0..m0+rows-1 (rows <= kSpan), each block's steps decoded once for all of them.
template <int Kind>
inline void group_span(const uint8_t* grp, int64_t nb, const ActQ8& x, int64_t m0, int64_t rows, __m256* acc) {
  for (int64_t j = 0; j < rows; ++j) acc[j] = _mm256_setzero_ps();
  __m256i w[8];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = grp + b * X8Record<Kind>::kBytes;
    decode_steps<Kind>(blk, w);
    int64_t j = 0;
    for (; j + 4 <= rows; j += 4) span_tile<Kind, 4>(blk, w, x, m0 + j, b, acc + j);
    switch (rows - j) {
      case 3: span_tile<Kind, 3>(blk, w, x, m0 + j, b, acc + j); break;
      case 2: span_tile<Kind, 2>(blk, w, x, m0 + j, b, acc + j); break;
      case 1: span_tile<Kind, 1>(blk, w, x, m0 + j, b, acc + j); break;
      default: break;
    }
  }
}

// Rows [0, rows) of acc to y (rows ldy apart), the first `valid` of each row's 8 lanes. MT > 0: rows = MT,
// known at compile time (the tile order's stores, once per group and tile, stay a few instructions).
template <int MT>
inline void store_rows(const __m256* acc, int64_t rows, float* y, int64_t ldy, int64_t valid) {
  const int64_t n = MT > 0 ? MT : rows;
  for (int64_t j = 0; j < n; ++j) {
    float* out = y + j * ldy;
    if (valid == 8) {
      _mm256_storeu_ps(out, acc[j]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[j]);
      for (int64_t r = 0; r < valid; ++r) out[r] = tmp[r];
    }
  }
}

template <int Kind>
void rows_x8(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t nb = group_bytes / X8Record<Kind>::kBytes;
  const bool span = Kind == 3 && x.M >= kSpanRows;
  __m256 acc[kSpan];
  for (int64_t n = n0; n < n1; n += 8) {
    const uint8_t* grp = w + (n / 8) * group_bytes;
    const int64_t valid = n1 - n < 8 ? n1 - n : 8;
    if (span) {
      for (int64_t m0 = 0; m0 < x.M; m0 += kSpan) {
        const int64_t rows = x.M - m0 < kSpan ? x.M - m0 : kSpan;
        group_span<Kind>(grp, nb, x, m0, rows, acc);
        store_rows<0>(acc, rows, y + m0 * ldy + n, ldy, valid);
      }
      continue;
    }
    int64_t m = 0;
    for (; m + 4 <= x.M; m += 4) {
      group_tile<Kind, 4>(grp, nb, x, m, acc);
      store_rows<4>(acc, 4, y + m * ldy + n, ldy, valid);
    }
    float* out = y + m * ldy + n;
    switch (x.M - m) {
      case 3: group_tile<Kind, 3>(grp, nb, x, m, acc); store_rows<3>(acc, 3, out, ldy, valid); break;
      case 2: group_tile<Kind, 2>(grp, nb, x, m, acc); store_rows<2>(acc, 2, out, ldy, valid); break;
      case 1: group_tile<Kind, 1>(grp, nb, x, m, acc); store_rows<1>(acc, 1, out, ldy, valid); break;
      default: break;
    }
  }
}

}  // namespace

void q4_0x8_rows_avx2(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
  rows_x8<0>(w, group_bytes, x, y, ldy, n0, n1);
}

void q4_1x8_rows_avx2(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
  rows_x8<1>(w, group_bytes, x, y, ldy, n0, n1);
}

void q8_0x8_rows_avx2(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
  rows_x8<2>(w, group_bytes, x, y, ldy, n0, n1);
}

void q5_0x8_rows_avx2(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
  rows_x8<3>(w, group_bytes, x, y, ldy, n0, n1);
}

}  // namespace haltwise_native
#endif  // __x86_64__
