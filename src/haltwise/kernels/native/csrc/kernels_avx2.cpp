// AVX2 + FMA + F16C kernels (x86-64). This file alone is compiled for that ISA (the pragma below);
// ops.cpp calls it only after the CPU has reported all three flags.
//
// Integer dot products use the AVX2 idiom without VNNI: _mm256_maddubs_epi16 multiplies unsigned by
// signed bytes and adds pairs into int16 (|2 * 127 * 128| < 32768: no saturation for these ranges),
// _mm256_madd_epi16 by ones widens pairs into int32. Signed weights use the sign trick
// (|w| as unsigned, x carrying w's sign). One 32-input block of weights is unpacked once and used for
// up to MT activation rows, so a decode step reads each weight byte once. The row-interleaved records'
// kernels are in kernels_x8_avx2.cpp and kernels_kx8_avx2.cpp.
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include <algorithm>

#include "quant_kernels.h"

namespace haltwise_native {
namespace {

inline float h(const uint8_t* p) {
  uint16_t v;
  __builtin_memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256((const __m256i*)p); }

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (inputs 0..15), then high nibbles (16..31).
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128((const __m128i*)qs);
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// 8 int32 partial sums of u[i] * s[i] as float: lanes 0..3 cover inputs 0..15, lanes 4..7 16..31.
inline __m256 dot_us(__m256i u, __m256i s) {
  const __m256i pairs = _mm256_maddubs_epi16(u, s);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

inline __m256 dot_ss(__m256i a, __m256i b) { return dot_us(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)); }

// Pointers to the activation rows one tile multiplies (MT rows of ActQ8).
template <int MT>
struct Tile {
  const int8_t* q[MT];
  const float* d[MT];
  const float* s[MT];
};

// --- formats: accumulate<MT>(weight block, tile, index of its first 32-input sub-block, acc, corr) ---

struct Q4_0F {
  static constexpr int kBytes = 18, kSubs = 1;
  template <int MT>
  static void accumulate(const uint8_t* blk, const Tile<MT>& t, int64_t sb, __m256* acc, float* corr) {
    const float d = h(blk);
    const __m256i w = nibbles(blk + 2);                  // q + 8, unsigned
    for (int j = 0; j < MT; ++j) {
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * t.d[j][sb]), dot_us(w, load32(t.q[j] + sb * QK)), acc[j]);
      corr[j] -= 8.0f * d * t.s[j][sb];
    }
  }
};

struct Q4_1F {
  static constexpr int kBytes = 20, kSubs = 1;
  template <int MT>
  static void accumulate(const uint8_t* blk, const Tile<MT>& t, int64_t sb, __m256* acc, float* corr) {
    const float d = h(blk), mn = h(blk + 2);
    const __m256i w = nibbles(blk + 4);
    for (int j = 0; j < MT; ++j) {
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * t.d[j][sb]), dot_us(w, load32(t.q[j] + sb * QK)), acc[j]);
      corr[j] += mn * t.s[j][sb];
    }
  }
};

// Byte i of the result is 0xFF where bit i of `bits` is set.
inline __m256i bytes_from_bits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32((int)bits),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

struct Q5_0F {
  static constexpr int kBytes = 22, kSubs = 1;
  template <int MT>
  static void accumulate(const uint8_t* blk, const Tile<MT>& t, int64_t sb, __m256* acc, float* corr) {
    const float d = h(blk);
    uint32_t qh;
    __builtin_memcpy(&qh, blk + 2, 4);
    const __m256i w = _mm256_or_si256(nibbles(blk + 6), _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10)));
    for (int j = 0; j < MT; ++j) {                         // w = q + 16, unsigned 0..31
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * t.d[j][sb]), dot_us(w, load32(t.q[j] + sb * QK)), acc[j]);
      corr[j] -= 16.0f * d * t.s[j][sb];
    }
  }
};

struct Q8_0F {
  static constexpr int kBytes = 34, kSubs = 1;
  template <int MT>
  static void accumulate(const uint8_t* blk, const Tile<MT>& t, int64_t sb, __m256* acc, float*) {
    const float d = h(blk);
    const __m256i w = load32(blk + 2);
    for (int j = 0; j < MT; ++j)
      acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * t.d[j][sb]), dot_ss(w, load32(t.q[j] + sb * QK)), acc[j]);
  }
};

struct Q4_KF {
  static constexpr int kBytes = 144, kSubs = 8;
  template <int MT>
  static void accumulate(const uint8_t* blk, const Tile<MT>& t, int64_t sb, __m256* acc, float* corr) {
    const float d = h(blk), dmin = h(blk + 2);
    const uint8_t* s = blk + 4;
    float sc[8], mn[8];
    for (int j = 0; j < 4; ++j) {
      sc[j] = d * (float)(s[j] & 63);
      mn[j] = dmin * (float)(s[j + 4] & 63);
      sc[j + 4] = d * (float)((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
      mn[j + 4] = dmin * (float)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
    }
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load32(blk + 16 + 32 * c);
      const __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
      const int64_t b0 = sb + 2 * c, b1 = b0 + 1;
      for (int j = 0; j < MT; ++j) {
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(sc[2 * c] * t.d[j][b0]), dot_us(lo, load32(t.q[j] + b0 * QK)), acc[j]);
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(sc[2 * c + 1] * t.d[j][b1]), dot_us(hi, load32(t.q[j] + b1 * QK)), acc[j]);
        corr[j] -= mn[2 * c] * t.s[j][b0] + mn[2 * c + 1] * t.s[j][b1];
      }
    }
  }
};

struct Q6_KF {
  static constexpr int kBytes = 210, kSubs = 8;
  template <int MT>
  static void accumulate(const uint8_t* blk, const Tile<MT>& t, int64_t sb, __m256* acc, float*) {
    const float d = h(blk + 208);
    const int8_t* scales = (const int8_t*)(blk + 192);
    const __m256i low4 = _mm256_set1_epi8(0x0F), bits45 = _mm256_set1_epi8(0x30), bias = _mm256_set1_epi8(32);
    for (int half = 0; half < 2; ++half) {
      const __m256i l0 = load32(blk + 64 * half), l1 = load32(blk + 64 * half + 32);
      const __m256i hh = load32(blk + 128 + 32 * half);
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(hh, 4), bits45));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(hh, 2), bits45));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(hh, bits45));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                             _mm256_and_si256(_mm256_srli_epi16(hh, 2), bits45));
      for (int sub = 0; sub < 4; ++sub) {
        const __m256i w = _mm256_sub_epi8(q[sub], bias);     // -32..31
        const int8_t* sc = scales + 8 * half + 2 * sub;     // one scale per 16 inputs
        const float s0 = d * (float)sc[0], s1 = d * (float)sc[1];
        const __m256 scv = _mm256_setr_ps(s0, s0, s0, s0, s1, s1, s1, s1);
        const int64_t b = sb + 4 * half + sub;
        for (int j = 0; j < MT; ++j)
          acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(scv, _mm256_set1_ps(t.d[j][b])), dot_ss(w, load32(t.q[j] + b * QK)), acc[j]);
      }
    }
  }
};

// MXFP4 rows (quant_kernels.h): each block's codes through a byte lookup (pshufb) into the doubled e2m1
// integers, their exact dot with the q8 row (sign trick, maddubs, madd: |12 * 127 * 2| fits int16), summed
// as integers; then the scalar path's float operations in its order, so the bits are the scalar path's.
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

void rows_mxfp4(const uint8_t* w, int64_t row_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const __m128i values = _mm_loadu_si128((const __m128i*)kMxfp4Values);
  const __m256i lut = _mm256_set_m128i(values, values), ones = _mm256_set1_epi16(1);
  mxfp4_rows(w, row_bytes, x, y, ldy, n0, n1, [&](const uint8_t* blk, const int8_t* xq) {
    const __m256i v = _mm256_shuffle_epi8(lut, nibbles(blk + 1));       // inputs 0..15, then 16..31
    const __m256i xs = load32(xq);
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xs, v));
    return hsum_i32(_mm256_madd_epi16(pairs, ones));
  });
}

// --- drivers ---

template <class F, int MT>
inline void row_tile(const uint8_t* row, int64_t nblk, const ActQ8& x, int64_t m0, float* y, int64_t ldy, int64_t n) {
  const int64_t nb = x.K / QK;
  Tile<MT> t;
  __m256 acc[MT];
  float corr[MT];
  for (int j = 0; j < MT; ++j) {
    t.q[j] = x.q + (m0 + j) * x.K;
    t.d[j] = x.d + (m0 + j) * nb;
    t.s[j] = x.s + (m0 + j) * nb;
    acc[j] = _mm256_setzero_ps();
    corr[j] = 0.0f;
  }
  for (int64_t b = 0; b < nblk; ++b) F::template accumulate<MT>(row + b * F::kBytes, t, b * F::kSubs, acc, corr);
  for (int j = 0; j < MT; ++j) y[(m0 + j) * ldy + n] = hsum(acc[j]) + corr[j];
}

template <class F>
void rows(const uint8_t* w, int64_t row_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t nblk = row_bytes / F::kBytes;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    if (n + 1 < n1) _mm_prefetch((const char*)(row + row_bytes), _MM_HINT_T0);
    int64_t m = 0;
    for (; m + 4 <= x.M; m += 4) row_tile<F, 4>(row, nblk, x, m, y, ldy, n);
    switch (x.M - m) {
      case 3: row_tile<F, 3>(row, nblk, x, m, y, ldy, n); break;
      case 2: row_tile<F, 2>(row, nblk, x, m, y, ldy, n); break;
      case 1: row_tile<F, 1>(row, nblk, x, m, y, ldy, n); break;
      default: break;
    }
  }
}

void quantize_avx2(const float* x, int64_t K, int8_t* q, float* d, float* s, int64_t m0, int64_t m1) {
  const int64_t nb = K / QK;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + m * K + b * QK;
      __m256 v[4];
      __m256 amax = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float mx = _mm_cvtss_f32(m4);
      const float scale = mx / 127.0f, inv = mx > 0.0f ? 127.0f / mx : 0.0f;
      const __m256 vinv = _mm256_set1_ps(inv);
      __m256i iv[4];
      __m256i sum = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        iv[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        sum = _mm256_add_epi32(sum, iv[i]);
      }
      const __m256i p01 = _mm256_packs_epi32(iv[0], iv[1]), p23 = _mm256_packs_epi32(iv[2], iv[3]);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), order);
      _mm256_storeu_si256((__m256i*)(q + m * K + b * QK), bytes);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      d[m * nb + b] = scale;
      s[m * nb + b] = scale * (float)_mm_cvtsi128_si32(s4);
    }
  }
}

#include "decode_math.inc"

#include "decode_math_avx2.inc"

#include "attend_kernels_avx2.inc"

#include "attend_avx2.inc"

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable table = {
      "avx2", quantize_avx2, rows<Q4_0F>, rows<Q4_1F>, rows<Q5_0F>, rows<Q8_0F>, rows<Q4_KF>, rows<Q6_KF>,
      q4_0x8_rows_avx2, q4_1x8_rows_avx2, q8_0x8_rows_avx2, q5_0x8_rows_avx2, q4_kx8_rows_avx2, q6_kx8_rows_avx2,
      {rms_norm_rows_impl, rope_rows_impl, attend_rows_avx2, store_kv_impl, gated_rows_avx2, dense_rows_impl, argmax_avx2},
      rows_mxfp4,
  };
  return table;
}

}  // namespace haltwise_native
#endif  // __x86_64__
