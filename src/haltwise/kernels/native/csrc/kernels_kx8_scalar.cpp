// Portable kernels for the K-quant row-interleaved records (Q4_KX8, Q6_KX8 in quant_kernels.h), and the
// reference the AVX2 twin (kernels_kx8_avx2.cpp) is tested against. Both compute, per output row and per
// 32-input sub-block j of the activations (scale xd, offset sum xs = xd * sum(xq)):
//     Q4_K: acc += (d * xd) * float(sc_j * sum_i q_i xq_i);  acc -= (dmin * mn_j) * xs
//     Q6_K: acc += (d * xd) * float(sc_2j * sum_{i<16} q_i xq_i + sc_2j+1 * sum_{i>=16} q_i xq_i)
// The integer parts are exact (|Q4_K| <= 63 * 32 * 15 * 127, |Q6_K| <= 2 * 128 * 16 * 32 * 127 < 2^24, so
// their float conversion is exact too); only the float steps may round differently from the AVX2 path.
// Batch invariant: row m's outputs are summed from its own activations, block by block, in one order.
#include <string.h>

#include "quant_kernels.h"

namespace haltwise_native {
namespace {

float f16(const uint8_t* p) {
  const uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    const float v = (float)mant * (1.0f / 16777216.0f);
    memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

constexpr int kQ4KRecord = 1184, kQ6KRecord = 1680;

// Row r's 32 quants of sub-block j: Q4_K 0..15 (the min is applied apart), Q6_K -32..31.
void q4_k_quants(const uint8_t* rec, int r, int j, int8_t* q) {
  const uint8_t* qs = rec + 160 + 256 * (j / 2);
  for (int s = 0; s < 8; ++s)
    for (int t = 0; t < 4; ++t) q[4 * s + t] = (int8_t)((qs[32 * s + 4 * r + t] >> (4 * (j % 2))) & 0x0F);
}

void q6_k_quants(const uint8_t* rec, int r, int j, int8_t* q) {
  const int h = j / 4, u = j % 4;
  const uint8_t* ql = rec + 144 + 256 * (2 * h + u % 2);
  const uint8_t* qh = rec + 1168 + 256 * h;
  for (int s = 0; s < 8; ++s)
    for (int t = 0; t < 4; ++t) {
      const int i = 32 * s + 4 * r + t;
      q[4 * s + t] = (int8_t)((((ql[i] >> (4 * (u / 2))) & 0x0F) | (((qh[i] >> (2 * u)) & 3) << 4)) - 32);
    }
}

int32_t dot16(const int8_t* q, const int8_t* xq) {
  int32_t sum = 0;
  for (int i = 0; i < 16; ++i) sum += (int32_t)q[i] * xq[i];
  return sum;
}

template <bool Q6>
void rows_kx8(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  constexpr int rec_bytes = Q6 ? kQ6KRecord : kQ4KRecord;
  const int64_t nblk = group_bytes / rec_bytes, nxb = x.K / QK;
  int8_t q[QK];
  for (int64_t n = n0; n < n1; ++n) {
    const int r = (int)(n % 8);
    const uint8_t* grp = w + (n / 8) * group_bytes;
    for (int64_t m = 0; m < x.M; ++m) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nblk; ++b) {
        const uint8_t* rec = grp + b * rec_bytes;
        const float d = f16(rec + 2 * r);
        for (int j = 0; j < 8; ++j) {
          const int64_t xb = m * nxb + 8 * b + j;
          const int8_t* xq = x.q + xb * QK;
          if (Q6) {
            q6_k_quants(rec, r, j, q);
            const int8_t* sc = (const int8_t*)(rec + 16);
            const int32_t isum = sc[8 * (2 * j) + r] * dot16(q, xq) + sc[8 * (2 * j + 1) + r] * dot16(q + 16, xq + 16);
            acc += (d * x.d[xb]) * (float)isum;
          } else {
            q4_k_quants(rec, r, j, q);
            const int32_t isum = (int32_t)rec[32 + 8 * j + r] * (dot16(q, xq) + dot16(q + 16, xq + 16));
            acc += (d * x.d[xb]) * (float)isum;
            acc -= (f16(rec + 16 + 2 * r) * (float)rec[96 + 8 * j + r]) * x.s[xb];
          }
        }
      }
      y[m * ldy + n] = acc;
    }
  }
}

}  // namespace

void q4_kx8_rows_scalar(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                        int64_t n1) {
  rows_kx8<false>(w, group_bytes, x, y, ldy, n0, n1);
}

void q6_kx8_rows_scalar(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0,
                        int64_t n1) {
  rows_kx8<true>(w, group_bytes, x, y, ldy, n0, n1);
}

}  // namespace haltwise_native
