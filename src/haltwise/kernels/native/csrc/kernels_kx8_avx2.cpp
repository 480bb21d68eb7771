// AVX2 + FMA + F16C kernels for the K-quant row-interleaved records (Q4_KX8, Q6_KX8 in quant_kernels.h).
// Compiled for that ISA alone (the pragma below); ops.cpp calls it only after the CPU reported all three.
//
// Lane r of every vector is output row 8g + r. Step s of a 32-input sub-block multiplies inputs 4s..4s+3:
// the weight vector holds those 4 quants of each of the 8 rows, the activation vector the same 4 bytes
// of x broadcast to every lane (_mm256_maddubs_epi16: unsigned weight x signed activation, pairs summed
// into int16). The integer sums and their per-row scale (_mm256_madd_epi16 by the scale in both int16
// halves of the lane) are exact, as in the scalar twin (kernels_kx8_scalar.cpp, which states the math):
//     Q4_K: quants 0..15, 8 steps in int16: 8 * 2 * 15 * 127 < 32768
//     Q6_K: quants -32..31 by the sign trick (|w| unsigned, x carrying w's sign), 4 steps (one scale's
//           16 inputs) in int16: 4 * 2 * 32 * 127 < 32768
// Loop orders: Q4_K, and Q6_K under kSpanRows activation rows, per tile of MT rows decode a sub-block's 8
// steps into registers and run each row through them; Q6_K from kSpanRows rows takes the span order of
// kernels_x8_avx2.cpp: per span of up to kSpan rows, each sub-block's steps (|q| and q) are decoded once
// into L1, then run step by step over the span's tiles, rows innermost (16 vectors held across a tile's
// rows spilled registers). On a Zen 3 core the span order ran Q6_K 1.16x at 8 rows, 1.3x at 12-32, and
// 0.9x at 2-4; Q4_K's span order was slower at every row count (0.8x), so it keeps the tile order.
// Batch invariant: activation row m has its own accumulator, fed block by block in one order by the same
// instructions whatever the tile width MT, the loop order or the span (exact integer sums, then the same
// float steps); threads split groups of output rows only.
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "quant_kernels.h"

namespace haltwise_native {
namespace {

constexpr int kQ4KRecord = 1184, kQ6KRecord = 1680;

inline __m256i load32(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }

inline __m256 load_f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

// 8 int32 lanes (sign- or zero-extended bytes) -> each lane's value in both of its int16 halves.
inline __m256i pair16(__m256i v) { return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA); }

inline __m256i bytes8_u(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)p)); }
inline __m256i bytes8_s(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)); }

// One 256-input block of 8 rows times MT activation rows (m0..m0+MT-1), added to acc.
template <int MT>
inline void q4_k_block(const uint8_t* rec, const ActQ8& x, int64_t m0, int64_t xb0, __m256* acc) {
  const int64_t nxb = x.K / QK;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256 d = load_f16x8(rec), dmin = load_f16x8(rec + 16);
  for (int j = 0; j < 8; ++j) {                               // sub-block: inputs 32j..32j+31
    const __m256i sc = pair16(bytes8_u(rec + 32 + 8 * j));
    const __m256 mn = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(bytes8_u(rec + 96 + 8 * j)));
    const uint8_t* qs = rec + 160 + 256 * (j / 2);
    __m256i w[8];
    for (int s = 0; s < 8; ++s) {
      const __m256i q = load32(qs + 32 * s);
      w[s] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, low4);
    }
    for (int m = 0; m < MT; ++m) {
      const int64_t xb = (m0 + m) * nxb + xb0 + j;
      const int32_t* xq = (const int32_t*)(x.q + xb * QK);
      __m256i s16 = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32(xq[0]));
      for (int s = 1; s < 8; ++s) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[s], _mm256_set1_epi32(xq[s])));
      const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16, sc));
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.d[xb])), isum, acc[m]);
      acc[m] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(x.s[xb]), acc[m]);
    }
  }
}

template <int MT>
inline void q6_k_block(const uint8_t* rec, const ActQ8& x, int64_t m0, int64_t xb0, __m256* acc) {
  const int64_t nxb = x.K / QK;
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
  const __m256 d = load_f16x8(rec);
  for (int j = 0; j < 8; ++j) {                               // sub-block j = 4h + u
    const int h = j / 4, u = j % 4;
    const __m256i sc0 = pair16(bytes8_s(rec + 16 + 16 * j)), sc1 = pair16(bytes8_s(rec + 24 + 16 * j));
    const uint8_t* ql = rec + 144 + 256 * (2 * h + u % 2);
    const uint8_t* qh = rec + 1168 + 256 * h;
    __m256i mag[8], sgn[8];
    for (int s = 0; s < 8; ++s) {
      const __m256i l = load32(ql + 32 * s), hh = load32(qh + 32 * s);
      const __m256i lo = _mm256_and_si256(u / 2 ? _mm256_srli_epi16(l, 4) : l, low4);
      const __m256i hi = u == 0 ? _mm256_slli_epi16(hh, 4) : u == 1 ? _mm256_slli_epi16(hh, 2)
                       : u == 2 ? hh : _mm256_srli_epi16(hh, 2);
      sgn[s] = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_and_si256(hi, bits45)), bias);   // -32..31
      mag[s] = _mm256_sign_epi8(sgn[s], sgn[s]);
    }
    for (int m = 0; m < MT; ++m) {
      const int64_t xb = (m0 + m) * nxb + xb0 + j;
      const int32_t* xq = (const int32_t*)(x.q + xb * QK);
      __m256i a = _mm256_maddubs_epi16(mag[0], _mm256_sign_epi8(_mm256_set1_epi32(xq[0]), sgn[0]));
      __m256i b = _mm256_maddubs_epi16(mag[4], _mm256_sign_epi8(_mm256_set1_epi32(xq[4]), sgn[4]));
      for (int s = 1; s < 4; ++s) {
        a = _mm256_add_epi16(a, _mm256_maddubs_epi16(mag[s], _mm256_sign_epi8(_mm256_set1_epi32(xq[s]), sgn[s])));
        b = _mm256_add_epi16(b, _mm256_maddubs_epi16(mag[s + 4], _mm256_sign_epi8(_mm256_set1_epi32(xq[s + 4]), sgn[s + 4])));
      }
      const __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(a, sc0), _mm256_madd_epi16(b, sc1));
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.d[xb])), _mm256_cvtepi32_ps(isum), acc[m]);
    }
  }
}

constexpr int64_t kSpan = 64;       // activation rows per span (their accumulators: kSpan * 32 bytes)
constexpr int64_t kSpanRows = 8;    // Q6_K takes the span order from this many activation rows

// Q6_K sub-block j (= 4h + u) of one record: its 8 step vectors of quants (-32..31) and their |q|.
struct Q6Steps {
  __m256i sgn[8], mag[8];
};

inline void q6_k_steps(const uint8_t* rec, int j, Q6Steps& st) {
  const int h = j / 4, u = j % 4;
  const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
  const uint8_t* ql = rec + 144 + 256 * (2 * h + u % 2);
  const uint8_t* qh = rec + 1168 + 256 * h;
  for (int s = 0; s < 8; ++s) {
    const __m256i l = load32(ql + 32 * s), hh = load32(qh + 32 * s);
    const __m256i lo = _mm256_and_si256(u / 2 ? _mm256_srli_epi16(l, 4) : l, low4);
    const __m256i hi = u == 0 ? _mm256_slli_epi16(hh, 4) : u == 1 ? _mm256_slli_epi16(hh, 2)
                     : u == 2 ? hh : _mm256_srli_epi16(hh, 2);
    st.sgn[s] = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_and_si256(hi, bits45)), bias);
    st.mag[s] = _mm256_sign_epi8(st.sgn[s], st.sgn[s]);
  }
}

// The span order's tile: sub-block j of one Q6_K record times activation rows m0..m0+MT-1, step by step.
template <int MT>
inline void q6_k_span_tile(const uint8_t* rec, int j, const Q6Steps& st, const ActQ8& x, int64_t m0, int64_t xb0,
                           __m256* acc) {
  const int64_t nxb = x.K / QK;
  const int8_t* xq[MT];
  for (int m = 0; m < MT; ++m) xq[m] = x.q + ((m0 + m) * nxb + xb0 + j) * QK;
  __m256i s16[MT], isum[MT];                              // set at s = 0 and s = 3
#pragma GCC unroll 8   // fully: the s % 4 branches then fold (a rolled loop ran ~1/3 slower)
  for (int s = 0; s < 8; ++s) {
    for (int m = 0; m < MT; ++m) {
      const __m256i xv = _mm256_sign_epi8(_mm256_set1_epi32(*(const int32_t*)(xq[m] + 4 * s)), st.sgn[s]);
      const __m256i p = _mm256_maddubs_epi16(st.mag[s], xv);
      s16[m] = s % 4 ? _mm256_add_epi16(s16[m], p) : p;
    }
    if (s % 4 == 3) {                                       // one int8 scale per 16 inputs
      const __m256i sc = pair16(bytes8_s(rec + 16 + 16 * j + (s == 3 ? 0 : 8)));
      for (int m = 0; m < MT; ++m) {
        const __m256i part = _mm256_madd_epi16(s16[m], sc);
        isum[m] = s == 3 ? part : _mm256_add_epi32(isum[m], part);
      }
    }
  }
  const __m256 d = load_f16x8(rec);
  for (int m = 0; m < MT; ++m) {
    const int64_t xb = (m0 + m) * nxb + xb0 + j;
    acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(x.d[xb])), _mm256_cvtepi32_ps(isum[m]), acc[m]);
  }
}

// Q6_K rows m0..m0+rows-1 (rows <= kSpan) of one group, every sub-block's steps decoded once for all.
inline void q6_k_group_span(const uint8_t* grp, int64_t nblk, const ActQ8& x, int64_t m0, int64_t rows, __m256* acc) {
  for (int64_t m = 0; m < rows; ++m) acc[m] = _mm256_setzero_ps();
  Q6Steps st;
  for (int64_t b = 0; b < nblk; ++b) {
    const uint8_t* rec = grp + b * kQ6KRecord;
    for (int j = 0; j < 8; ++j) {
      q6_k_steps(rec, j, st);
      int64_t m = 0;
      for (; m + 4 <= rows; m += 4) q6_k_span_tile<4>(rec, j, st, x, m0 + m, 8 * b, acc + m);
      switch (rows - m) {
        case 3: q6_k_span_tile<3>(rec, j, st, x, m0 + m, 8 * b, acc + m); break;
        case 2: q6_k_span_tile<2>(rec, j, st, x, m0 + m, 8 * b, acc + m); break;
        case 1: q6_k_span_tile<1>(rec, j, st, x, m0 + m, 8 * b, acc + m); break;
        default: break;
      }
    }
  }
}

void store_rows(const __m256* acc, int64_t rows, float* y, int64_t ldy, int64_t valid) {
  for (int64_t m = 0; m < rows; ++m) {
    float* out = y + m * ldy;
    if (valid == 8) {
      _mm256_storeu_ps(out, acc[m]);
    } else {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, acc[m]);
      for (int64_t r = 0; r < valid; ++r) out[r] = tmp[r];
    }
  }
}

template <bool Q6, int MT>
inline void group_tile(const uint8_t* grp, int64_t nblk, const ActQ8& x, int64_t m0, __m256* acc) {
  constexpr int rec_bytes = Q6 ? kQ6KRecord : kQ4KRecord;
  for (int m = 0; m < MT; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nblk; ++b) {
    if (Q6) q6_k_block<MT>(grp + b * rec_bytes, x, m0, 8 * b, acc);
    else q4_k_block<MT>(grp + b * rec_bytes, x, m0, 8 * b, acc);
  }
}

// The span order over groups [n0, n1) of Q6_K.
void q6_k_rows_span(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y,
                                              int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t nblk = group_bytes / kQ6KRecord;
  __m256 acc[kSpan];
  for (int64_t n = n0; n < n1; n += 8) {
    const uint8_t* grp = w + (n / 8) * group_bytes;
    const int64_t valid = n1 - n < 8 ? n1 - n : 8;
    for (int64_t m0 = 0; m0 < x.M; m0 += kSpan) {
      const int64_t rows = x.M - m0 < kSpan ? x.M - m0 : kSpan;
      q6_k_group_span(grp, nblk, x, m0, rows, acc);
      store_rows(acc, rows, y + m0 * ldy + n, ldy, valid);
    }
  }
}

template <bool Q6>
void rows_kx8(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  if (Q6 && x.M >= kSpanRows) return q6_k_rows_span(w, group_bytes, x, y, ldy, n0, n1);
  const int64_t nblk = group_bytes / (Q6 ? kQ6KRecord : kQ4KRecord);
  __m256 acc[4];
  for (int64_t n = n0; n < n1; n += 8) {
    const uint8_t* grp = w + (n / 8) * group_bytes;
    const int64_t valid = n1 - n < 8 ? n1 - n : 8;
    int64_t m = 0;
    for (; m + 4 <= x.M; m += 4) {
      group_tile<Q6, 4>(grp, nblk, x, m, acc);
      store_rows(acc, 4, y + m * ldy + n, ldy, valid);
    }
    switch (x.M - m) {
      case 3: group_tile<Q6, 3>(grp, nblk, x, m, acc); break;
      case 2: group_tile<Q6, 2>(grp, nblk, x, m, acc); break;
      case 1: group_tile<Q6, 1>(grp, nblk, x, m, acc); break;
      default: break;
    }
    store_rows(acc, x.M - m, y + m * ldy + n, ldy, valid);
  }
}

}  // namespace

void q4_kx8_rows_avx2(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
  rows_kx8<false>(w, group_bytes, x, y, ldy, n0, n1);
}

void q6_kx8_rows_avx2(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                      int64_t n1) {
  rows_kx8<true>(w, group_bytes, x, y, ldy, n0, n1);
}

}  // namespace haltwise_native
#endif  // __x86_64__
