// Which output tile and which K blocks a block owns: the swizzled grid of the one-block-per-tile
// kernels and the rasterised walk of the persistent ones.
#pragma once

#include "../common.cuh"

namespace int8nax {

// ---- which output tile and which K range a block owns ----

// The swizzled tile decode of int8nax.tiling.launch()/tile_of(): gridDim.x = tiles_n << s.
// Split z of gridDim.z owns K blocks [k_blocks * z / splits, k_blocks * (z + 1) / splits)
// (cuda_plans.split_ranges); a split may be empty when splits > k_blocks, and then still
// writes its (zero) partial sums.
struct TileCoords {
  int m0;
  int n0;
  int kb0;      // first K block (of BK) of this block's split
  int kbs;      // number of K blocks, >= 0
  bool filler;  // past the last M tile: the block only pads the swizzled grid
};

template <int BM, int BN, int BK>
__device__ __forceinline__ TileCoords tile_coords(int M, int N, int K) {
  const int tiles_n = ceil_div(N, BN);
  const int group = gridDim.x / tiles_n;  // 1 << swizzle_log
  const int s = __ffs(group) - 1;
  const int tile_m = (blockIdx.y << s) + (blockIdx.x & (group - 1));
  const int tile_n = blockIdx.x >> s;
  const int k_blocks = ceil_div(K, BK);
  const int kb0 = k_blocks * static_cast<int>(blockIdx.z) / static_cast<int>(gridDim.z);
  const int kb1 = k_blocks * static_cast<int>(blockIdx.z + 1) / static_cast<int>(gridDim.z);
  return TileCoords{tile_m * BM, tile_n * BN, kb0, kb1 - kb0, tile_m * BM >= M};
}

// The persistent kernels' walk: work unit u (< tiles_m * tiles_n * splits) is split z = u % splits
// of tile u / splits; tiles are numbered in bands of `group` M-tiles, N-major inside a band, so
// that the blocks running at once share A rows and B columns in L2 (cuda_plans.ws_unit mirrors
// this). A block walks u = blockIdx.x, + gridDim.x, ...
struct WsUnit {
  int m0;
  int n0;
  int z;
  int kb0;
  int kbs;
};

template <int BM, int BN>
__device__ __forceinline__ WsUnit ws_unit(int u, int M, int N, int K, int splits, int group) {
  const int tiles_m = ceil_div(M, BM);
  const int tiles_n = ceil_div(N, BN);
  const int tile = u / splits;
  const int z = u - tile * splits;
  const int band = tile / (group * tiles_n);
  const int r = tile - band * group * tiles_n;
  const int first_m = band * group;
  const int rows = min(group, tiles_m - first_m);
  const int tile_m = first_m + r % rows;
  const int tile_n = r / rows;
  const int k_blocks = ceil_div(K, 128);
  const int kb0 = static_cast<int>(static_cast<long long>(k_blocks) * z / splits);
  const int kb1 = static_cast<int>(static_cast<long long>(k_blocks) * (z + 1) / splits);
  return WsUnit{tile_m * BM, tile_n * BN, z, kb0, kb1 - kb0};
}

}  // namespace int8nax
