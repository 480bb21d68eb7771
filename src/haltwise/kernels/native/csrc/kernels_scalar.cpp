// Portable kernels: plain C++ the compiler may auto-vectorise for the baseline ISA of any target.
//
// Every block format is decoded one 32-input sub-block at a time into
//     w[i] = scale[i / 16] * q[i] + offset        (q int8, i in 0..31)
// so one integer dot product per sub-block serves all formats:
//     sum_i w[i] x[i] ~= xd * (scale[0] * sum_{i<16} q[i] xq[i] + scale[1] * sum_{i>=16} ...) + offset * xs
// with xs = xd * sum(xq). These kernels are also the reference the ISA-specific ones are tested against.
#include <math.h>
#include <string.h>

#include "quant_kernels.h"

namespace haltwise_native {
namespace {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);                     // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);             // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;                                                   // +-0
  } else {                                                         // subnormal: mant * 2^-24
    float v = (float)mant * (1.0f / 16777216.0f);
    memcpy(&bits, &v, 4);
    bits |= sign;
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t u16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
float h(const uint8_t* p) { return f16_to_f32(u16(p)); }

struct SubBlock {
  int8_t q[QK];
  float scale[2];
  float offset;
};

// Decoders: sub-block `b` (of 32 inputs) of one weight row.
void decode_q4_0(const uint8_t* row, int64_t b, SubBlock& o) {
  const uint8_t* blk = row + b * 18;
  o.scale[0] = o.scale[1] = h(blk);
  o.offset = 0.0f;
  for (int i = 0; i < 16; ++i) {
    o.q[i] = (int8_t)((blk[2 + i] & 0x0F) - 8);
    o.q[i + 16] = (int8_t)((blk[2 + i] >> 4) - 8);
  }
}

void decode_q4_1(const uint8_t* row, int64_t b, SubBlock& o) {
  const uint8_t* blk = row + b * 20;
  o.scale[0] = o.scale[1] = h(blk);
  o.offset = h(blk + 2);
  for (int i = 0; i < 16; ++i) {
    o.q[i] = (int8_t)(blk[4 + i] & 0x0F);
    o.q[i + 16] = (int8_t)(blk[4 + i] >> 4);
  }
}

void decode_q5_0(const uint8_t* row, int64_t b, SubBlock& o) {
  const uint8_t* blk = row + b * 22;
  o.scale[0] = o.scale[1] = h(blk);
  o.offset = 0.0f;
  const uint32_t qh = (uint32_t)blk[2] | ((uint32_t)blk[3] << 8) | ((uint32_t)blk[4] << 16) | ((uint32_t)blk[5] << 24);
  for (int i = 0; i < 16; ++i) {
    o.q[i] = (int8_t)(((blk[6 + i] & 0x0F) | (((qh >> i) & 1) << 4)) - 16);
    o.q[i + 16] = (int8_t)(((blk[6 + i] >> 4) | (((qh >> (i + 16)) & 1) << 4)) - 16);
  }
}

void decode_q8_0(const uint8_t* row, int64_t b, SubBlock& o) {
  const uint8_t* blk = row + b * 34;
  o.scale[0] = o.scale[1] = h(blk);
  o.offset = 0.0f;
  memcpy(o.q, blk + 2, QK);
}

// Q4_K: 256 inputs = 8 sub-blocks; 6-bit scale and min per sub-block packed in 12 bytes.
void scale_min_k4(int j, const uint8_t* s, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void decode_q4_k(const uint8_t* row, int64_t b, SubBlock& o) {
  const uint8_t* blk = row + (b / 8) * 144;
  const int j = (int)(b % 8);
  int sc, mn;
  scale_min_k4(j, blk + 4, sc, mn);
  o.scale[0] = o.scale[1] = h(blk) * (float)sc;
  o.offset = -h(blk + 2) * (float)mn;
  const uint8_t* qs = blk + 16 + 32 * (j / 2);       // 32 bytes: low nibbles = sub-block 2c, high = 2c + 1
  const int shift = (j % 2) * 4;
  for (int i = 0; i < QK; ++i) o.q[i] = (int8_t)((qs[i] >> shift) & 0x0F);
}

// Q6_K: 256 inputs in two halves of 128; each half's 4 sub-blocks of 32 take their low 4 bits from
// ql (64 bytes: sub-blocks 0/1 low nibbles, 2/3 high nibbles) and 2 high bits from qh (32 bytes,
// bit pair 2 * sub-block). One int8 scale per 16 inputs.
void decode_q6_k(const uint8_t* row, int64_t b, SubBlock& o) {
  const uint8_t* blk = row + (b / 8) * 210;
  const int j = (int)(b % 8), half = j / 4, sub = j % 4;
  const uint8_t* ql = blk + 64 * half + 32 * (sub % 2);
  const uint8_t* qh = blk + 128 + 32 * half;
  const int8_t* sc = (const int8_t*)(blk + 192) + 8 * half + 2 * sub;
  const float d = h(blk + 208);
  o.scale[0] = d * (float)sc[0];
  o.scale[1] = d * (float)sc[1];
  o.offset = 0.0f;
  const int lshift = (sub / 2) * 4, hshift = 2 * sub;
  for (int i = 0; i < QK; ++i)
    o.q[i] = (int8_t)((((ql[i] >> lshift) & 0x0F) | (((qh[i] >> hshift) & 3) << 4)) - 32);
}

template <void (*Decode)(const uint8_t*, int64_t, SubBlock&)>
void rows_generic(const uint8_t* w, int64_t row_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t nb = x.K / QK;
  SubBlock sb;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = w + n * row_bytes;
    for (int64_t m = 0; m < x.M; ++m) {
      const int8_t* xq = x.q + m * x.K;
      const float* xd = x.d + m * nb;
      const float* xs = x.s + m * nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        Decode(row, b, sb);
        int32_t lo = 0, hi = 0;
        for (int i = 0; i < 16; ++i) lo += (int32_t)sb.q[i] * xq[b * QK + i];
        for (int i = 16; i < QK; ++i) hi += (int32_t)sb.q[i] * xq[b * QK + i];
        acc += xd[b] * (sb.scale[0] * (float)lo + sb.scale[1] * (float)hi) + sb.offset * xs[b];
      }
      y[m * ldy + n] = acc;
    }
  }
}

// Row-interleaved records (quant_kernels.h): Kind 0 = Q4_0X8, 1 = Q4_1X8, 2 = Q8_0X8.
template <int Kind>
void rows_x8(const uint8_t* w, int64_t group_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  // Kind: 0 Q4_0, 1 Q4_1, 2 Q8_0, 3 Q5_0
  constexpr int rec = Kind == 0 ? 144 : Kind == 1 ? 160 : Kind == 2 ? 272 : 176;
  constexpr int qoff = Kind == 1 ? 32 : Kind == 3 ? 48 : 16;
  const int64_t nb = x.K / QK;
  int8_t q[QK];
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t g = n / 8, r = n % 8;
    for (int64_t m = 0; m < x.M; ++m) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = w + g * group_bytes + b * rec;
        const float d = h(blk + 2 * r), offset = Kind == 1 ? h(blk + 16 + 2 * r) : 0.0f;
        for (int j = 0; j < (Kind == 2 ? 8 : 4); ++j) {
          for (int t = 0; t < 4; ++t) {
            const uint8_t byte = blk[qoff + 32 * j + 4 * r + t];
            if (Kind == 2) {
              q[4 * j + t] = (int8_t)byte;
            } else if (Kind == 3) {
              const uint32_t qh = (uint32_t)blk[16 + 4 * r] | (uint32_t)blk[17 + 4 * r] << 8 |
                                  (uint32_t)blk[18 + 4 * r] << 16 | (uint32_t)blk[19 + 4 * r] << 24;
              q[4 * j + t] = (int8_t)(((byte & 0x0F) | ((qh >> (8 * t + j)) & 1) << 4) - 16);
              q[16 + 4 * j + t] = (int8_t)(((byte >> 4) | ((qh >> (8 * t + j + 4)) & 1) << 4) - 16);
            } else {
              q[4 * j + t] = (int8_t)((byte & 0x0F) - (Kind == 0 ? 8 : 0));
              q[16 + 4 * j + t] = (int8_t)((byte >> 4) - (Kind == 0 ? 8 : 0));
            }
          }
        }
        int32_t isum = 0;
        for (int i = 0; i < QK; ++i) isum += (int32_t)q[i] * x.q[m * x.K + b * QK + i];
        acc += x.d[m * nb + b] * d * (float)isum + offset * x.s[m * nb + b];
      }
      y[m * ldy + n] = acc;
    }
  }
}

// MXFP4 rows (quant_kernels.h states the arithmetic every path shares).
void rows_mxfp4(const uint8_t* w, int64_t row_bytes, const ActQ8& x, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  mxfp4_rows(w, row_bytes, x, y, ldy, n0, n1, [](const uint8_t* blk, const int8_t* xq) {
    int32_t isum = 0;
    for (int i = 0; i < 16; ++i) {
      isum += (int32_t)kMxfp4Values[blk[1 + i] & 0x0F] * xq[i];
      isum += (int32_t)kMxfp4Values[blk[1 + i] >> 4] * xq[16 + i];
    }
    return isum;
  });
}

void quantize_scalar(const float* x, int64_t K, int8_t* q, float* d, float* s, int64_t m0, int64_t m1) {
  const int64_t nb = K / QK;
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + m * K + b * QK;
      float amax = 0.0f;
      for (int i = 0; i < QK; ++i) amax = fmaxf(amax, fabsf(xb[i]));
      const float scale = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int i = 0; i < QK; ++i) {
        const int v = (int)nearbyintf(xb[i] * inv);   // round half to even, as the AVX2 path
        q[m * K + b * QK + i] = (int8_t)v;
        sum += v;
      }
      d[m * nb + b] = scale;
      s[m * nb + b] = scale * (float)sum;
    }
  }
}

#include "decode_math.inc"

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable table = {
      "scalar", quantize_scalar,
      rows_generic<decode_q4_0>, rows_generic<decode_q4_1>, rows_generic<decode_q5_0>,
      rows_generic<decode_q8_0>, rows_generic<decode_q4_k>, rows_generic<decode_q6_k>,
      rows_x8<0>, rows_x8<1>, rows_x8<2>, rows_x8<3>, q4_kx8_rows_scalar, q6_kx8_rows_scalar,
      {rms_norm_rows_impl, rope_rows_impl, attend_rows_impl, store_kv_impl, gated_rows_impl, dense_rows_impl, argmax_impl},
      rows_mxfp4,
  };
  return table;
}

}  // namespace haltwise_native
