// GGUF block rows -> X8 records, 8 rows side by side (the layout repack.py's docstring specifies and
// quant_kernels.h reads). One pass over the blocks, with the GIL released: a start regroups every linear
// it runs (Qwen2.5-Coder-0.5B: 485 MB of blocks), two layers at a time on the plan's Python threads.
#include <torch/extension.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "native_linear.h"

namespace haltwise_native {
namespace {

namespace py = pybind11;

// Q5_0's qh bit moves: stored bit 8t + s <- source bit (s < 4 ? 4s + t : 16 + 4(s - 4) + t), as a
// 256-entry table per source byte (repack.py's module docstring).
std::array<std::array<uint32_t, 256>, 4> q5_high_bit_tables() {
  std::array<int, 32> dest{};
  for (int t = 0; t < 4; ++t)
    for (int s = 0; s < 8; ++s) dest[s < 4 ? 4 * s + t : 16 + 4 * (s - 4) + t] = 8 * t + s;
  std::array<std::array<uint32_t, 256>, 4> tables{};
  for (int byte = 0; byte < 4; ++byte)
    for (uint32_t v = 0; v < 256; ++v)
      for (int k = 0; k < 8; ++k)
        if ((v >> k) & 1) tables[byte][v] |= uint32_t{1} << dest[8 * byte + k];
  return tables;
}

const auto kQ5Tables = q5_high_bit_tables();

// `width` bytes from `start` of each of the 8 rows' block, row after row.
void put_rows(uint8_t* dst, const uint8_t* const* row, int64_t start, int64_t width) {
  for (int r = 0; r < 8; ++r) std::memcpy(dst + r * width, row[r] + start, width);
}

// n quant bytes from `start`, 4 bytes per row per step: word j of row r goes to word 8j + r.
void put_by_step(uint8_t* dst, const uint8_t* const* row, int64_t start, int64_t n) {
  for (int64_t j = 0; j < n / 4; ++j)
    for (int r = 0; r < 8; ++r) std::memcpy(dst + 4 * (8 * j + r), row[r] + start + 4 * j, 4);
}

// `count` one-byte values per row (values[r * count + k]) side by side: value k of row r -> byte 8k + r.
void put_side_by_side(uint8_t* dst, const uint8_t* values, int count) {
  for (int k = 0; k < count; ++k)
    for (int r = 0; r < 8; ++r) dst[8 * k + r] = values[r * count + k];
}

// The record of one block of 8 rows (row[r] points at row r's block); returns the bytes written.
int64_t write_record(uint8_t* dst, const uint8_t* const* row, int64_t qtype) {
  uint8_t* out = dst;
  switch (qtype) {
    case Q4_0: case Q8_0:
      put_rows(out, row, 0, 2), out += 16;
      put_by_step(out, row, 2, qtype == Q4_0 ? 16 : 32), out += 8 * (qtype == Q4_0 ? 16 : 32);
      break;
    case Q4_1:
      put_rows(out, row, 0, 2), out += 16;
      put_rows(out, row, 2, 2), out += 16;
      put_by_step(out, row, 4, 16), out += 128;
      break;
    case Q5_0:
      put_rows(out, row, 0, 2), out += 16;
      for (int r = 0; r < 8; ++r, out += 4) {
        uint32_t qh, moved = 0;
        std::memcpy(&qh, row[r] + 2, 4);
        for (int byte = 0; byte < 4; ++byte) moved |= kQ5Tables[byte][(qh >> (8 * byte)) & 0xFF];
        std::memcpy(out, &moved, 4);
      }
      put_by_step(out, row, 6, 16), out += 128;
      break;
    case Q6_K: {   // ql[128] qh[64] scales[16] d -> d[8] | scales[16][8] | ql by step | qh by step
      uint8_t scales[8][16];
      for (int r = 0; r < 8; ++r) std::memcpy(scales[r], row[r] + 192, 16);
      put_rows(out, row, 208, 2), out += 16;
      put_side_by_side(out, scales[0], 16), out += 128;
      put_by_step(out, row, 0, 128), out += 1024;
      put_by_step(out, row, 128, 64), out += 512;
      break;
    }
    case Q4_K: {   // d dmin scales[12] qs[128] -> d[8] | dmin[8] | sc[8][8] | mn[8][8] | qs by step
      uint8_t sc[8][8], mn[8][8];
      for (int r = 0; r < 8; ++r) {
        const uint8_t* s = row[r] + 4;
        for (int j = 0; j < 4; ++j) {
          sc[r][j] = s[j] & 63, mn[r][j] = s[4 + j] & 63;
          sc[r][4 + j] = (s[8 + j] & 0x0F) | ((s[j] >> 6) << 4);
          mn[r][4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 6) << 4);
        }
      }
      put_rows(out, row, 0, 2), out += 16;
      put_rows(out, row, 2, 2), out += 16;
      put_side_by_side(out, sc[0], 8), out += 64;
      put_side_by_side(out, mn[0], 8), out += 64;
      put_by_step(out, row, 16, 128), out += 1024;
      break;
    }
  }
  return out - dst;
}

// Every row's first byte, part after part (a fused linear's shards read as one matrix, never concatenated),
// and the bytes of a row.
std::pair<std::vector<const uint8_t*>, int64_t> row_starts(const std::vector<py::buffer>& parts, int64_t qtype) {
  std::vector<const uint8_t*> starts;
  int64_t row_bytes = -1;
  for (const py::buffer& part : parts) {
    const py::buffer_info in = part.request();
    if (in.ndim != 2 || in.itemsize != 1 || in.strides[1] != 1 || in.strides[0] != in.shape[1])
      throw std::invalid_argument("repack_x8: each part must be a C-contiguous (rows, bytes per row) uint8 array");
    if (row_bytes >= 0 && in.shape[1] != row_bytes)
      throw std::invalid_argument("repack_x8: the parts' rows differ in length");
    row_bytes = in.shape[1];
    for (int64_t r = 0; r < in.shape[0]; ++r) starts.push_back(static_cast<const uint8_t*>(in.ptr) + r * row_bytes);
  }
  if (row_bytes < 0) throw std::invalid_argument("repack_x8: no parts");
  if (row_bytes % block_shape(qtype).second)
    throw std::invalid_argument("repack_x8: a row is not a whole number of blocks");
  return {starts, row_bytes};
}

// (groups, bytes a group) of the records of `rows` rows of `row_bytes` bytes of `qtype`.
std::pair<int64_t, int64_t> records_shape(int64_t rows, int64_t row_bytes, int64_t qtype) {
  return {(rows + 7) / 8, row_bytes / block_shape(qtype).second * block_shape(qtype + 1000).second};
}

void write_records(const std::vector<const uint8_t*>& starts, int64_t row_bytes, int64_t qtype, uint8_t* dst) {
  const int64_t block = block_shape(qtype).second, record = block_shape(qtype + 1000).second;   // 8 rows' record
  const int64_t rows = static_cast<int64_t>(starts.size()), nb = row_bytes / block, groups = (rows + 7) / 8;
  py::gil_scoped_release unlocked;     // the parts' buffers stay alive: the caller holds them
  std::vector<uint8_t> zeros(row_bytes, 0);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* row[8];
    for (int r = 0; r < 8; ++r) row[r] = 8 * g + r < rows ? starts[8 * g + r] : zeros.data();
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = dst + (g * nb + b) * record;
      const uint8_t* at[8];
      for (int r = 0; r < 8; ++r) at[r] = row[r] + b * block;
      write_record(rec, at, qtype);
    }
  }
}

// Parts of (rows_i, bytes per row) blocks of `qtype` -> (ceil(rows / 8), records) uint8, rows padded with
// zero blocks.
torch::Tensor repack_x8(const std::vector<py::buffer>& parts, int64_t qtype) {
  const auto [starts, row_bytes] = row_starts(parts, qtype);
  const auto [groups, width] = records_shape(static_cast<int64_t>(starts.size()), row_bytes, qtype);
  torch::Tensor out = torch::empty({groups, width}, torch::TensorOptions().dtype(torch::kUInt8));
  write_records(starts, row_bytes, qtype, out.data_ptr<uint8_t>());
  return out;
}

// The same records written into `out`, a writable C-contiguous uint8 buffer of records_shape's bytes (a map of
// the record file: no copy passes through the process's own memory).
void repack_x8_into(const std::vector<py::buffer>& parts, int64_t qtype, const py::buffer& out) {
  const auto [starts, row_bytes] = row_starts(parts, qtype);
  const auto [groups, width] = records_shape(static_cast<int64_t>(starts.size()), row_bytes, qtype);
  const py::buffer_info o = out.request(true);
  if (o.itemsize != 1 || o.size != groups * width)
    throw std::invalid_argument("repack_x8_into: out must hold exactly the records' bytes");
  write_records(starts, row_bytes, qtype, static_cast<uint8_t*>(o.ptr));
}

}  // namespace

void register_repack(py::module_& m) {
  m.def("repack_x8", &repack_x8, "GGUF block rows, in parts -> X8 records (8 rows side by side; repack.py)",
        py::arg("parts"), py::arg("qtype"));
  m.def("repack_x8_into", &repack_x8_into, "repack_x8 written into a writable buffer of records_shape's bytes",
        py::arg("parts"), py::arg("qtype"), py::arg("out"));
  m.def("records_shape", &records_shape, "(groups, bytes a group) of the X8 records of rows x row_bytes blocks",
        py::arg("rows"), py::arg("row_bytes"), py::arg("qtype"));
}

}  // namespace haltwise_native
