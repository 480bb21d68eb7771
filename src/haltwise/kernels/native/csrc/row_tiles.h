// Row tiles of a step: runs of consecutive rows that share one block table (one sequence's prefill rows), at
// most kTileRows long, the rows MathKernels::attend_rows takes at once. A decode batch's rows are tiles
// of one. Tiling changes which K/V reads are shared, never a value (attend_rows gives each row attend's
// bits), so any tiling is correct; two rows with one table always read the same cache rows.
#pragma once
#include <torch/extension.h>

#include <cstring>
#include <vector>

namespace haltwise_native {

struct RowTile {
  int64_t first, rows;
};

constexpr int64_t kTileRows = 8;

// block_tables (T, nb) int64, contiguous.
inline std::vector<RowTile> row_tiles(const torch::Tensor& block_tables, int64_t T) {
  const int64_t nb = block_tables.size(1);
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  std::vector<RowTile> tiles;
  for (int64_t t = 0; t < T;) {
    int64_t end = t + 1;
    while (end < T && end - t < kTileRows && std::memcmp(tables + end * nb, tables + t * nb, nb * sizeof(int64_t)) == 0)
      ++end;
    tiles.push_back({t, end - t});
    t = end;
  }
  return tiles;
}

}  // namespace haltwise_native
